"""Search in time: find_first, last_change and next_change against a straight run checked after every event.

The oracle re-runs the recorded seed one event at a time and evaluates the predicate (or digests
the watched path) after each event and at the end; the searches must name the same event, by any
strategy, from any cursor — and on a branch, across its fork.
"""

from __future__ import annotations

import copy
import itertools
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from branch_writing import append_branch, world_at

from timetravel.explore import Session
from timetravel.explore.commands import CommandContext, CommandError, render_text, run_line
from timetravel.explore.paths import parse_path, select, world_tree
from timetravel.explore.predicates import parse_predicate
from timetravel.explore.search import STOP_CANCELLED, STOP_EVENTS_MAX, find_first
from timetravel.explore.watchpoints import last_change, next_change
from timetravel.explore.work import WorkProgress
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim import Simulation, World
from timetravel.sim.encoding import digest
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import Scenario

END = "end"


def states(
    scenario: Scenario, config: dict[str, Any], seed: int, world: World | None = None
) -> Iterator[tuple[Any, World]]:
    """The world after every event (#0 first), then the final state as ``"end"``."""
    world = world if world is not None else build_world(scenario, config, seed)
    simulation = Simulation(scenario, world)
    yield world.events_processed, world
    while True:
        before = world.events_processed
        result = simulation.run(max_events=1)
        if world.events_processed == before:
            yield END, world
            return
        yield world.events_processed, world
        if result.stop == "failure":
            yield END, world
            return


def oracle_first(
    scenario: Scenario, config: dict[str, Any], seed: int, predicate: str, start: int = 0
) -> tuple[int, str | None, tuple[str, ...]] | None:
    """(event, "end" or None, witnesses) of the first state at or after #start where it holds."""
    parsed = parse_predicate(predicate)
    previous = None
    last_number = 0
    for number, world in states(scenario, config, seed):
        tree = world_tree(world)
        result = parsed.evaluate(tree, previous)
        if parsed.uses_changed:
            previous = copy.deepcopy(tree)
        if number != END:
            last_number = number
        if (number == END or number >= start) and result.holds:
            return (last_number, END if number == END else None, result.witnesses)
    return None


def digests_along(
    scenario: Scenario, config: dict[str, Any], seed: int, path: str
) -> list[tuple[Any, dict[str, bytes]]]:
    parsed = parse_path(path)
    return [
        (number, {concrete: digest(value) for concrete, value in select(world_tree(world), parsed)})
        for number, world in states(scenario, config, seed)
    ]


def oracle_last(
    along: list[tuple[Any, dict[str, bytes]]], cursor: int, at_end: bool
) -> tuple[int, bool] | None:
    """(event, at_end) of the latest change at or before the cursor."""
    numbered = [(n, d) for n, d in along if n != END]
    final = along[-1][1]
    if at_end and final != numbered[-1][1]:
        return numbered[-1][0], True
    for (n, d), (_, before) in zip(
        reversed(numbered[1 : cursor + 1]), reversed(numbered[:cursor]), strict=True
    ):
        if d != before:
            return n, False
    return None


def oracle_next(along: list[tuple[Any, dict[str, bytes]]], cursor: int) -> tuple[int, bool] | None:
    numbered = [(n, d) for n, d in along if n != END]
    for (n, d), (_, before) in zip(numbered[cursor + 1 :], numbered[cursor:], strict=False):
        if d != before:
            return n, False
    if along[-1][1] != numbered[-1][1]:
        return numbered[-1][0], True
    return None


GOSSIP = get_scenario("gossip")


@pytest.fixture(scope="module")
def gossip(gossip_recording: tuple[Path, dict[str, Any]]) -> Iterator[tuple[Session, dict[str, Any]]]:
    path, report = gossip_recording
    with Session.open(path) as session:
        yield session, report


# -- find_first ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "predicate",
    [
        "nodes/*/received >= 5",
        "nodes/n5/received >= 3",
        "nodes/*/seen/11 == true",
        "exists(failures/0)",
        "t_ns >= 5ms",
        "sum(nodes/*/received) >= 100",
    ],
)
def test_find_first_by_bisection_names_the_oracles_event_for_monotone_predicates(
    gossip: tuple[Session, dict[str, Any]], predicate: str
) -> None:
    session, report = gossip
    expected = oracle_first(GOSSIP, report["config"], 3, predicate)
    result = find_first(session, predicate, strategy="bisect")
    assert result.strategy == "bisect"
    assert expected is not None and result.found
    event, end, witnesses = expected
    assert (result.event, result.kind == END, result.witnesses) == (event, end == END, witnesses)
    if end is None:
        recorded = session.event(event)
        assert recorded is not None and (result.node, result.kind, result.t_ns) == (
            recorded.node,
            recorded.kind,
            recorded.t_ns,
        )
    # bisecting snapshots leaves one interval (512 events) to re-execute: once in chunks, then
    # once more up to the chunk where the predicate starts to hold
    assert result.replayed_events <= 2 * 512
    assert result.snapshots_checked <= 4  # 3 bisection steps over the 4 snapshots after #0, the end


def test_the_failure_of_an_end_of_run_oracle_is_found_at_the_end(
    gossip: tuple[Session, dict[str, Any]],
) -> None:
    session, report = gossip
    result = find_first(session, "exists(failures/0)")
    assert (result.event, result.kind, result.node, result.t_ns) == (
        report["events"],
        "end",
        None,
        report["t_end_ns"],
    )
    text = render_text(result)
    assert "the end-of-run checks" in text[0]


@pytest.mark.parametrize(
    "predicate", ["nodes/load/injected == 8", "changed(nodes/n7/seen)", "changed(nodes/*/received)"]
)
def test_scanning_is_exact_for_predicates_that_stop_holding(
    gossip: tuple[Session, dict[str, Any]], predicate: str
) -> None:
    session, report = gossip
    expected = oracle_first(GOSSIP, report["config"], 3, predicate, start=600)
    result = find_first(session, predicate, start_events=600, strategy="scan")
    assert expected is not None
    assert (result.event, result.witnesses) == (expected[0], expected[2])
    assert result.strategy == "scan"
    session.goto("end")
    assert not parse_predicate(predicate).evaluate(world_tree(session.world)).holds  # it stopped holding


def test_changed_always_scans_and_from_a_start_it_holds_at_the_start(
    gossip: tuple[Session, dict[str, Any]],
) -> None:
    session, _report = gossip
    assert find_first(session, "changed(nodes/n7/seen)").strategy == "scan"
    assert find_first(session, "nodes/load/injected == 8").strategy == "scan"  # equal for a while
    assert find_first(session, "nodes/load/injected >= 8").strategy == "bisect"
    held = find_first(session, "nodes/*/received >= 1", start_events=700)
    assert held.event == 700


def test_a_predicate_that_never_holds_is_not_found(gossip: tuple[Session, dict[str, Any]]) -> None:
    session, _ = gossip
    for strategy in ("bisect", "scan"):
        result = find_first(session, "nodes/n5/received > 10000", strategy=strategy)
        assert not result.found and result.event is None and result.stopped_by is None
    assert render_text(result)[0].startswith("nodes/n5/received > 10000: never holds on main")


def test_a_search_is_bounded_reports_progress_and_can_be_cancelled(
    gossip: tuple[Session, dict[str, Any]],
) -> None:
    session, _ = gossip
    bounded = find_first(session, "nodes/n5/received > 10000", strategy="scan", events_max=500)
    assert (bounded.found, bounded.stopped_by) == (False, STOP_EVENTS_MAX)
    assert 500 < bounded.replayed_events <= 501
    seen: list[WorkProgress] = []
    find_first(session, "nodes/*/received > 10000", strategy="scan", progress=seen.append)
    assert seen and all((p.task, p.detail) == ("search", "events") for p in seen)
    from timetravel.shell.monitor import progress_text  # the shell's progress line reads it as is

    assert (
        progress_text(seen[0])
        == f"search: {seen[0].done * 100 // seen[0].total}% ({seen[0].done:,}/{seen[0].total:,}), events"
    )
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    calls = iter(range(100))
    cancelled = find_first(session, "changed(nodes/n5/seen)", should_stop=lambda: next(calls) >= 3)
    assert cancelled.stopped_by == STOP_CANCELLED and not cancelled.found


def test_the_cursor_does_not_move_during_a_search(gossip: tuple[Session, dict[str, Any]]) -> None:
    session, _ = gossip
    session.goto("#321")
    before = (session.position, session.state_hash())
    find_first(session, "nodes/*/received >= 5")
    last_change(session, "nodes/n3")
    next_change(session, "nodes/n3")
    assert (session.position, session.state_hash()) == before


# -- last_change / next_change --------------------------------------------------------------------


@pytest.mark.parametrize("path", ["nodes/n5/received", "nodes/*/seen", "nodes/load", "metrics", "failures"])
def test_watchpoints_name_the_oracles_last_and_next_change_from_any_cursor(
    gossip: tuple[Session, dict[str, Any]], path: str
) -> None:
    session, report = gossip
    along = digests_along(GOSSIP, report["config"], 3, path)
    rng = random.Random(path)
    cursors = [0, 1, 511, 512, 513, report["events"] - 1, *rng.sample(range(report["events"]), 6)]
    for cursor in cursors:
        expected_last = oracle_last(along, cursor, at_end=False)
        found = last_change(session, path, start_events=cursor)
        assert (found.event, found.kind == END) == (expected_last or (None, False)), (path, cursor)
        expected_next = oracle_next(along, cursor)
        found = next_change(session, path, start_events=cursor)
        assert (found.event, found.kind == END) == (expected_next or (None, False)), (path, cursor)
    at_end = last_change(session, path, start_events=report["events"])
    assert (at_end.event, at_end.kind == END) == (
        oracle_last(along, report["events"], at_end=True) or (None, False)
    )


def test_a_value_that_changes_and_changes_back_is_still_a_change(
    gossip: tuple[Session, dict[str, Any]],
) -> None:
    """An A -> B -> A history inside one snapshot window: digests at the window's ends are equal,
    and the reverse watchpoint must still find the change back to A."""
    session, report = gossip
    along = digests_along(GOSSIP, report["config"], 3, "queue")
    cursor = 900
    expected = oracle_last(along, cursor, at_end=False)
    assert expected is not None and expected[0] == cursor  # the queue changes with every event
    assert last_change(session, "queue", start_events=cursor).event == cursor


def test_a_watch_on_one_node_skips_windows_where_no_event_reaches_it(
    gossip_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    _, report = gossip_recording
    path = tmp_path / "fine.ttr"
    record_run(GOSSIP, report["config"], 3, path, snapshot_every_events=64)
    with Session.open(path) as session:
        numbers: dict[str, list[int]] = {}
        for number, event in ((n, session.event(n)) for n in range(1, report["events"] + 1)):
            assert event is not None
            numbers.setdefault(event.node, []).append(number)
        gap, before, after, node = max(
            (b - a, a, b, name) for name, found in numbers.items() for a, b in itertools.pairwise(found)
        )
        assert node.startswith("n") and gap > 3 * 64  # several whole windows without an event for it
        result = last_change(session, f"nodes/{node}/received", start_events=after - 1)
        assert result.event == before  # every rumor a peer receives adds to its count
        # only the window holding that event was re-executed; the later ones were read, not run
        assert result.replayed_events <= 64


# -- on a branch, across its fork ----------------------------------------------------------------


@pytest.fixture(scope="module")
def branched(
    gossip_recording: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, int]:
    source, _ = gossip_recording
    path = tmp_path_factory.mktemp("branched") / "branched.ttr"
    shutil.copy(source, path)
    fork = 700
    world = world_at(path, fork)
    world.branch_key = 1
    append_branch(path, GOSSIP, world, fork, changes={"branch_key": 1})
    return path, fork


def branch_states(config: dict[str, Any], fork: int) -> Iterator[tuple[Any, World]]:
    world = build_world(GOSSIP, config, 3)
    Simulation(GOSSIP, world).run(max_events=fork)
    world.branch_key = 1
    yield from states(GOSSIP, config, 3, world)


def test_searches_on_a_branch_cross_its_fork(
    branched: tuple[Path, int], gossip_recording: tuple[Path, dict[str, Any]]
) -> None:
    path, fork = branched
    config = gossip_recording[1]["config"]
    with Session.open(path, branch="b1") as session:
        at_fork = next(world for _, world in branch_states(config, fork)).nodes["n9"]["received"]
        predicate = parse_predicate(f"nodes/n9/received >= {at_fork + 3}")
        expected = next(
            number
            for number, world in branch_states(config, fork)
            if predicate.evaluate(world_tree(world)).holds
        )
        assert expected != END and expected > fork
        assert find_first(session, predicate).event == expected
        assert find_first(session, predicate, strategy="scan").event == expected
        along = [(n, {"v": digest(w.nodes["n9"]["received"])}) for n, w in branch_states(config, fork)]
        prefix = [
            (n, {"v": digest(w.nodes["n9"]["received"])})
            for n, w in states(GOSSIP, config, 3)
            if n != END and n < fork
        ]
        history = prefix + along
        assert (
            next_change(session, "nodes/n9/received", start_events=fork - 1).event
            == oracle_next(history, fork - 1)[0]
        )  # type: ignore[index]
        expected_last = oracle_last(history, fork + 5, at_end=False)
        assert (
            last_change(session, "nodes/n9/received", start_events=fork + 5).event
            == (expected_last or (None,))[0]
        )
    with Session.open(path) as main:
        context = CommandContext(session=main)
        result = run_line(f"find-first {predicate.text} --branch b1", context)
        assert result.event == expected and result.branch == "b1" and context.session is main
        run_line(f"find-first {predicate.text} --branch b1 --go", context)
        assert context.session.branch == "b1" and context.session.position.events == expected
        context.close()


# -- the fabric example: kernels, streams, a race that makes replicas differ ----------------------


REPLICAS_DIFFER = "differ(nodes/*/buffers/weights) and min(nodes/*/step) == max(nodes/*/step)"
"""Every rank has finished the same step, and their weights are not all the same: the replicas
diverged. (Weights alone differ for a moment in every run, between two ranks' updates of a step.)"""


def record_example(tmp_path: Path, **settings: Any) -> tuple[Path, Scenario, dict[str, Any], dict[str, Any]]:
    from fabric_example import SCENARIO

    config = SCENARIO.resolve_config(settings)
    path = tmp_path / "example.ttr"
    report, _ = record_run(SCENARIO, config, 1, path, snapshot_every_events=64)
    return path, SCENARIO, config, report


def test_find_first_names_the_first_event_and_rank_where_replicas_differ(tmp_path: Path) -> None:
    path, scenario, config, report = record_example(tmp_path, bug="missing_wait", race_detector=False)
    assert report["failure"]["kind"] == "divergence"
    expected = oracle_first(scenario, config, 1, REPLICAS_DIFFER)
    assert expected is not None and expected[1] is None
    with Session.open(path, scenario=scenario) as session:
        # not monotone (it stops holding while ranks are between steps), so scan
        scanned = find_first(session, REPLICAS_DIFFER, strategy="scan")
        assert (scanned.event, scanned.witnesses) == (expected[0], expected[2])
        assert scanned.kind == "gpu.done"  # the last rank's update of step 1 finishes
        assert scanned.witnesses[0] == "nodes/r0/buffers/weights" and len(scanned.witnesses) > 1
        session.goto_event(expected[0])
        assert {state["step"] for state in session.world.nodes.values()} == {1}


def test_replicas_never_differ_at_a_common_step_without_the_bug(tmp_path: Path) -> None:
    path, scenario, _, report = record_example(tmp_path)
    assert report["outcome"] == "pass"
    with Session.open(path, scenario=scenario) as session:
        assert not find_first(session, REPLICAS_DIFFER, strategy="scan").found
        transient = find_first(session, "differ(nodes/*/buffers/weights)", strategy="scan")
        assert transient.found and transient.kind == "gpu.done"  # between two ranks' updates


# -- the commands ---------------------------------------------------------------------------------


def test_find_first_and_watch_commands_move_the_cursor(gossip: tuple[Session, dict[str, Any]]) -> None:
    session, _ = gossip
    context = CommandContext(session=session)
    session.goto("start")
    found = run_line("find-first nodes/n5/received >= 3", context)
    assert session.position.events == 0  # found, not moved
    moved = run_line("find-first nodes/n5/received >= 3 --go", context)
    assert session.position.events == found.event == moved.event
    lines = render_text(moved)
    assert (
        lines[0]
        == f"nodes/n5/received >= 3: first holds at {session.position.t_ns / 1e6:g}ms, event #{found.event} (rumor -> n5) on main"
    )
    # watch --previous/--next (navigation.py) go through the same search engine
    back = run_line("watch nodes/n5/received --previous", context)
    assert back.found and session.world.nodes["n5"]["received"] == 2
    forward = run_line("watch nodes/n5/received --next", context)
    assert forward.found and session.position.events == found.event
    with pytest.raises(CommandError, match="no branch 'b9'"):
        run_line("find-first exists(failures/0) --branch b9", context)


def test_find_first_from_a_time_reads_the_display_unit(gossip: tuple[Session, dict[str, Any]]) -> None:
    session, report = gossip
    context = CommandContext(session=session)
    result = run_line("find-first --scan changed(nodes/n5/received) --from 5", context)
    expected = oracle_first(
        GOSSIP, report["config"], 3, "changed(nodes/n5/received)", start=_events_by(session, 5_000_000) + 1
    )
    assert expected is not None and result.event == expected[0]


def _events_by(session: Session, t_ns: int) -> int:
    return max(
        (n for n in range(session.end.events + 1) if n == 0 or session.event(n).t_ns <= t_ns), default=0
    )  # type: ignore[union-attr]


def test_a_search_on_code_that_replays_differently_raises_instead_of_answering(tmp_path: Path) -> None:
    """Searches re-execute; when today's code departs from the recording they say so (the
    first differing event), never answer about a history that was not recorded."""
    import dataclasses

    from timetravel.explore import ReplayDivergence
    from timetravel.scenarios import pingpong

    path = tmp_path / "pingpong.ttr"
    record_run(
        pingpong.SCENARIO,
        pingpong.SCENARIO.resolve_config({"rounds": 200}),
        1,
        path,
        snapshot_every_events=64,
    )

    def pong_twice(state: dict[str, Any], event: Any, ctx: Any) -> None:
        state["replies"] += 1
        ctx.send("ping", "pong", event.payload, pingpong.MESSAGE_BYTES)
        if event.payload == 120:  # "today's code" sends one message more than the recorded one
            ctx.send("ping", "pong", event.payload, pingpong.MESSAGE_BYTES)

    changed = dataclasses.replace(
        pingpong.SCENARIO, handlers={**pingpong.SCENARIO.handlers, "pong": {"ping": pong_twice}}
    )
    with Session.open(path, scenario=changed) as session, pytest.raises(ReplayDivergence) as raised:
        find_first(session, "nodes/pong/replies >= 150", strategy="scan")
    mismatch = raised.value.mismatch
    assert mismatch.what == "event" and mismatch.event is not None and mismatch.event > 240
