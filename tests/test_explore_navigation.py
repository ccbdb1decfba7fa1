"""The command handlers over the Session: goto/step/back/where, events, print, watch, faults,
branches; the binding a front end opens a recording with; and ``timetravel faults PATH``.

Every expectation is computed from an independent straight run of the kernel (or from the
recording's own events), never copied from the handlers' output.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from branch_writing import append_branch, world_at
from fabric_example import SCENARIO as FABRIC_EXAMPLE
from scenario_fixtures import FLOATS

from timetravel.cli import main as cli_main
from timetravel.explore import results
from timetravel.explore.commands import (
    CommandContext,
    CommandError,
    RecordingValues,
    complete,
    open_context,
    render_text,
    run_line,
)
from timetravel.explore.commands.navigation import WATCHES_MAX
from timetravel.explore.paths import PathError
from timetravel.explore.session import Session
from timetravel.recording import record_run
from timetravel.scenarios import UnknownScenarioError, get_scenario
from timetravel.sim import Simulation
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import Scenario
from timetravel.sim.timefmt import parse_time
from timetravel.sim.world import World

GOSSIP = get_scenario("gossip")
GOSSIP_CONFIG = GOSSIP.resolve_config({"nodes": 16, "rumors": 6, "coverage_min": 0.99})
GOSSIP_SEED = 3
FABRIC_CONFIG = FABRIC_EXAMPLE.resolve_config({"faults": "swarm", "faults_max": 12})
FABRIC_SEED = 0
DROPPED_FAULT = "f3"
FORK_EVENT = 20


def straight(scenario: Scenario, config: dict[str, Any], seed: int, **run: Any) -> World:
    world = build_world(scenario, config, seed)
    Simulation(scenario, world).run(**run)
    return world


def branch_straight(**run: Any) -> World:
    """What branch b1 is: the fabric run to FORK_EVENT, DROPPED_FAULT removed, branch key 1."""
    world = straight(FABRIC_EXAMPLE, FABRIC_CONFIG, FABRIC_SEED, max_events=FORK_EVENT)
    world.faults = [fault for fault in world.faults if fault["id"] != DROPPED_FAULT]
    world.branch_key = 1
    Simulation(FABRIC_EXAMPLE, world).run(**run)
    return world


@pytest.fixture(scope="module")
def gossip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("nav") / "gossip.ttr"
    report, _ = record_run(GOSSIP, GOSSIP_CONFIG, GOSSIP_SEED, path, snapshot_every_events=64)
    return path, report


@pytest.fixture(scope="module")
def fabric_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """A swarm-fault run of fabric_example, plus a branch b1 forked early that drops one fault
    (written the way the explore engine writes branches: a BRANCH frame, then a Recorder)."""
    path = tmp_path_factory.mktemp("nav") / "fabric.ttr"
    report, _ = record_run(FABRIC_EXAMPLE, FABRIC_CONFIG, FABRIC_SEED, path, snapshot_every_events=64)
    world = world_at(path, FORK_EVENT, FABRIC_EXAMPLE)
    dropped = next(fault for fault in world.faults if fault["id"] == DROPPED_FAULT)
    assert world.t_ns < dropped["t_start"], "the fork must come before the dropped fault starts"
    world.faults = [fault for fault in world.faults if fault["id"] != DROPPED_FAULT]
    world.branch_key = 1
    changes = {"drop_fault": [DROPPED_FAULT], "branch_key": 1}
    branch_end = append_branch(
        path, FABRIC_EXAMPLE, world, FORK_EVENT, changes=changes, snapshot_every_events=64
    )
    return path, report, branch_end


def lines(result: Any, context: CommandContext) -> list[str]:
    rendered = render_text(result, context.display_unit)
    assert rendered and all(isinstance(line, str) for line in rendered)
    return rendered


# -- moving the cursor -----------------------------------------------------------------------------


def test_goto_step_back_and_where_stand_where_a_straight_run_does(
    gossip: tuple[Path, dict[str, Any]],
) -> None:
    path, report = gossip
    t_ns = report["t_end_ns"] // 2
    expected = straight(GOSSIP, GOSSIP_CONFIG, GOSSIP_SEED, until_ns=t_ns)
    with open_context(path) as context:
        result = run_line(f"goto {t_ns}ns", context)
        assert isinstance(result, results.CursorResult)
        assert (result.branch, result.t_ns, result.event) == ("main", t_ns, expected.events_processed)
        assert (result.events_total, result.t_end_ns) == (report["events"], report["t_end_ns"])
        assert context.session.state_hash() == expected.state_hash()
        upcoming = min(expected.queue)
        assert result.next_event == {
            "number": expected.events_processed + 1,
            "t_ns": upcoming[0],
            "dst": upcoming[2],
            "kind": upcoming[3],
        }
        assert result.failure is not None and result.failure["signature"] == report["failure"]["signature"]
        assert not any("FAIL" in line for line in lines(result, context))  # not failed yet at T

        stepped = run_line("step 7", context)
        assert stepped.event == expected.events_processed + 7
        assert (
            context.session.state_hash()
            == straight(GOSSIP, GOSSIP_CONFIG, GOSSIP_SEED, max_events=stepped.event).state_hash()
        )
        assert run_line("back 3", context).event == expected.events_processed + 4
        assert run_line("back", context).event == expected.events_processed + 3
        assert run_line("step", context).event == expected.events_processed + 4
        where = run_line("where", context)
        assert where == run_line("where", context) and where.event == expected.events_processed + 4

        at_event = run_line("goto #25", context)
        assert at_event.event == 25
        assert at_event.t_ns == straight(GOSSIP, GOSSIP_CONFIG, GOSSIP_SEED, max_events=25).t_ns
        end = run_line(f"goto #{report['events'] + 1000}", context)
        assert (end.event, end.t_ns, end.next_event) == (report["events"], report["t_end_ns"], None)
        assert any(line.strip().startswith("FAIL") for line in lines(end, context))
        assert run_line("back 100000", context).event == 0


def test_commands_that_need_a_recording_say_so_and_help_does_not() -> None:
    context = CommandContext()
    for line in ("where", "goto 5", "events", "print nodes", "watch", "faults", "branches"):
        with pytest.raises(CommandError, match="no recording is open"):
            run_line(line, context)
    assert "goto" in [entry.name for entry in run_line("help", context).entries]


# -- events ----------------------------------------------------------------------------------------


def test_events_are_the_recorded_rows_around_the_cursor_with_filters(
    gossip: tuple[Path, dict[str, Any]],
) -> None:
    path, report = gossip
    with open_context(path) as context:
        session = context.session
        recorded = [session.event(number) for number in range(1, report["events"] + 1)]
        run_line("goto #100", context)
        before = run_line("events --count 5", context)
        assert isinstance(before, results.EventsResult)
        assert [row.number for row in before.rows] == [96, 97, 98, 99, 100]
        assert before.cursor_event == 100 and before.omitted == 95
        assert [(row.t_ns, row.dst, row.kind) for row in before.rows] == [
            (event.t_ns, event.node, event.kind) for event in recorded[95:100]
        ]
        assert lines(before, context)[-2].startswith("> #100")

        after = run_line("events --after --count 3", context)
        assert [row.number for row in after.rows] == [101, 102, 103]
        assert after.omitted == report["events"] - 103

        node = recorded[99].node
        mine = [event.number for event in recorded if event.node == node]
        filtered = run_line(f"events --node {node} --count 2", context)
        wanted = [number for number in mine if number <= 100]
        assert [row.number for row in filtered.rows] == wanted[-2:]
        assert filtered.omitted == len(wanted) - 2
        later = run_line(f"events --node {node} --kind rumor --after --count 1000", context)
        assert [row.number for row in later.rows] == [
            event.number
            for event in recorded
            if event.number > 100 and event.node == node and event.kind == "rumor"
        ]
        assert later.omitted == 0
        assert run_line("events --kind no-such-kind", context).rows == ()
        with pytest.raises(CommandError, match="at most"):
            run_line("events --count 5000", context)


# -- print -----------------------------------------------------------------------------------------


def test_print_shows_the_state_at_the_cursor_with_arrays_summarized(
    gossip: tuple[Path, dict[str, Any]],
) -> None:
    path, _report = gossip
    expected = straight(GOSSIP, GOSSIP_CONFIG, GOSSIP_SEED, max_events=150)
    with open_context(path) as context:
        run_line("goto #150", context)
        node = run_line("print nodes/n3", context)
        assert isinstance(node, results.PrintResult) and node.path == "nodes/n3" and node.omitted == 0
        by_path = {entry.path: entry for entry in node.entries}
        state = expected.nodes["n3"]
        assert set(state) <= {p.rsplit("/", 1)[-1] for p in by_path}
        seen = by_path["nodes/n3/seen"]
        assert seen.kind == "array" and seen.depth == 0
        assert seen.summary.startswith(f"bool{list(state['seen'].shape)}")
        assert f"mean={float(np.mean(state['seen']))}" in seen.summary
        assert by_path["nodes/n3/received"].summary == repr(state["received"])

        leaf = run_line("print nodes/n3/received", context)
        assert [(e.path, e.kind, e.summary) for e in leaf.entries] == [
            ("nodes/n3/received", "int", repr(state["received"]))
        ]
        matches = run_line("print nodes/*/received", context)
        assert [e.path for e in matches.entries] == [
            f"nodes/{name}/received" for name in expected.nodes if "received" in expected.nodes[name]
        ]
        assert any(line.strip().startswith("nodes/n0/received:") for line in lines(matches, context))

        top = run_line("print --depth 1", context)
        assert [entry.path for entry in top.entries][:3] == ["scenario", "seed", "branch_key"]
        bounded = run_line("print nodes --depth 2", context)
        assert len(bounded.entries) + bounded.omitted == len(expected.nodes) + sum(
            len(state) for state in expected.nodes.values()
        )
        with pytest.raises(PathError, match="no key 'n99'"):
            run_line("print nodes/n99", context)
        with pytest.raises(CommandError, match="--depth"):
            run_line("print nodes --depth 0", context)


def test_print_bounds_its_rows(gossip: tuple[Path, dict[str, Any]]) -> None:
    from timetravel.explore.view import print_entries

    path, _report = gossip
    with Session.open(path) as session:
        session.goto("#150")
        entries, omitted = print_entries(session.world, "nodes", 3, entries_max=10)
        full, none_left = print_entries(session.world, "nodes", 3, entries_max=10_000)
        assert len(entries) == 10 and omitted == len(full) - 10 and none_left == 0
        assert entries == full[:10]


# -- watch -----------------------------------------------------------------------------------------


def received_after(events: int) -> int:
    return int(straight(GOSSIP, GOSSIP_CONFIG, GOSSIP_SEED, max_events=events).nodes["n3"]["received"])


def test_watch_shows_a_value_at_every_move_and_finds_the_next_and_previous_change(
    gossip: tuple[Path, dict[str, Any]],
) -> None:
    path, report = gossip
    received = [received_after(n) for n in range(report["events"] + 1)]
    changes = [n for n in range(1, len(received)) if received[n] != received[n - 1]]
    assert len(changes) >= 3
    with open_context(path) as context:
        run_line(f"goto #{changes[1] - 1}", context)
        added = run_line("watch nodes/n3/received", context)
        assert isinstance(added, results.WatchResult) and context.watches == ["nodes/n3/received"]
        assert [(w.value, w.changed) for w in added.watches] == [(str(received[changes[1] - 1]), False)]
        stepped = run_line("step", context)
        assert [(w.value, w.changed) for w in stepped.watches] == [(str(received[changes[1]]), True)]
        assert run_line("where", context).watches[0].changed is False  # shown already, no move

        forward = run_line("watch nodes/n3/received --next", context)
        assert forward.found and forward.moved is not None and forward.moved.event == changes[2]
        assert context.session.position.events == changes[2]
        back = run_line("watch nodes/n3/received --previous", context)
        assert back.moved is not None and back.moved.event == changes[1]
        back = run_line("watch nodes/n3/received --previous", context)
        assert back.moved is not None and back.moved.event == changes[0]
        nothing = run_line("watch nodes/n3/received --previous", context)
        assert not nothing.found and nothing.moved is None
        assert context.session.position.events == changes[0]  # unmoved

        run_line("goto 1ms", context)
        unchanged = run_line("watch seed --next", context)
        assert not unchanged.found and context.session.position.t_ns == 1_000_000
        assert context.watches == ["nodes/n3/received", "seed"]
        assert run_line("watch --clear seed", context).watches[0].expression == "nodes/n3/received"
        with pytest.raises(CommandError, match="not watched"):
            run_line("watch --clear seed", context)
        assert run_line("watch --clear", context).watches == () and context.watches == []
        for index in range(WATCHES_MAX):
            run_line(f"watch nodes/n{index % 16}/_choices/{index}", context)
        with pytest.raises(CommandError, match=f"at most {WATCHES_MAX}"):
            run_line("watch seed", context)
        assert all(w.value == "<absent>" for w in run_line("watch", context).watches)
        with pytest.raises(CommandError, match="not both"):
            run_line("watch seed --next --previous", context)


# -- faults and branches ---------------------------------------------------------------------------


def test_faults_at_the_cursor_and_of_another_branch(
    fabric_run: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    path, report, _branch_end = fabric_run
    with open_context(path, scenario=FABRIC_EXAMPLE) as context:
        at_start = run_line("faults", context)
        initial = build_world(FABRIC_EXAMPLE, FABRIC_CONFIG, FABRIC_SEED)
        assert isinstance(at_start, results.FaultsResult) and at_start.branch == "main"
        assert [fault["id"] for fault in at_start.faults] == [fault["id"] for fault in initial.faults]
        assert all(fault["hits"] == 0 and "expected" in fault for fault in at_start.faults)
        assert len(lines(at_start, context)) == len(initial.faults)

        run_line(f"goto #{report['events']}", context)
        end_world = straight(FABRIC_EXAMPLE, FABRIC_CONFIG, FABRIC_SEED)
        at_end = run_line("faults", context)
        assert {f["id"]: f["hits"] for f in at_end.faults} == {
            f["id"]: end_world.fabric["fault_hits"].get(f["id"], 0) for f in end_world.faults
        }
        assert any(fault["hits"] > 0 for fault in at_end.faults)

        other = run_line("faults --branch b1", context)
        assert other.branch == "b1" and context.session.branch == "main"
        branch_world = branch_straight()
        assert [f["id"] for f in other.faults] == [f["id"] for f in branch_world.faults]
        assert DROPPED_FAULT not in [f["id"] for f in other.faults]
        with pytest.raises(CommandError, match="no branch 'b9'"):
            run_line("faults --branch b9", context)


def test_branches_lists_main_and_the_stored_branch_and_goto_switches(
    fabric_run: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    path, report, branch_end = fabric_run
    branch_world = branch_straight()
    assert branch_end["state_hash"] == branch_world.state_hash()
    with open_context(path, scenario=FABRIC_EXAMPLE) as context:
        tree = run_line("branches", context)
        assert isinstance(tree, results.BranchesResult) and tree.current == "main"
        main, b1 = tree.branches
        assert (main.name, main.parent, main.outcome) == ("main", "", report["outcome"])
        assert main.failure is not None and main.failure["signature"] == report["failure"]["signature"]
        fork_t = straight(FABRIC_EXAMPLE, FABRIC_CONFIG, FABRIC_SEED, max_events=FORK_EVENT).t_ns
        assert (b1.name, b1.parent, b1.at_ns) == ("b1", "main", fork_t)
        assert b1.outcome == ("fail" if branch_world.failures else "pass")
        assert (b1.events, b1.t_end_ns) == (branch_world.events_processed, branch_world.t_ns)
        assert set(b1.changes) == {f"drop_fault={[DROPPED_FAULT]}", "branch_key=1"}
        assert lines(tree, context)[0].startswith("* main")

        later = (FORK_EVENT + branch_world.events_processed) // 2
        moved = run_line(f"goto #{later} --branch b1", context)
        assert (moved.branch, moved.event) == ("b1", later)
        assert context.session.state_hash() == branch_straight(max_events=later - FORK_EVENT).state_hash()
        assert run_line("branches", context).current == "b1"
        with pytest.raises(CommandError, match=r"no branch 'b7' \(branches: main, b1\)"):
            run_line("goto 5 --branch b7", context)
        assert run_line("goto #3 --branch main", context).branch == "main"


# -- the binding front ends use --------------------------------------------------------------------


def test_open_context_and_recording_values_feed_completion(
    fabric_run: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    path, report, _ = fabric_run
    initial = build_world(FABRIC_EXAMPLE, FABRIC_CONFIG, FABRIC_SEED)
    with open_context(path, scenario=FABRIC_EXAMPLE, branch="b1") as context:
        values = RecordingValues(context)
        assert context.session.branch == "b1" and context.session.position.events == 0
        assert values.values("branch", "") == ["main", "b1"]
        assert values.notes("branch")["main"] == report["outcome"]
        assert values.values("node", "r") == [name for name in initial.nodes if name.startswith("r")]
        assert values.values("fault", "") == [fault["id"] for fault in initial.faults]
        assert values.notes("fault")["f1"] == f"{initial.faults[0]['kind']} {initial.faults[0]['target']}"
        assert "ranks=" in values.values("setting", "ra")
        times = values.values("time", "")
        session = context.session
        marks = {info.t_ns for info in session.snapshots()} | {session.end.t_ns}
        assert [parse_time(text, context.display_unit) for text in times] == sorted(marks)
        assert values.notes("time")[times[0]] == "snapshot 0" and values.notes("time")[times[-1]] == "end"
        assert values.values("path", "nodes/r1/") == [f"nodes/r1/{key}" for key in initial.nodes["r1"]]
        assert [c.text for c in complete("goto 5 --branch ", values)] == ["main", "b1"]
        assert [c.text for c in complete("print nodes/r1/st", values)] == [
            f"nodes/r1/{key}" for key in initial.nodes["r1"] if key.startswith("st")
        ]
        run_line("goto #1 --branch main", context)
        assert values.session is context.session and values.session.branch == "main"
        assert values.branch_names() == ["main", "b1"]
        assert values.metric_rows("main", "no-such-metric") is None
        assert values.metric_rows("b9", "anything") is None
    assert context.session is None
    assert RecordingValues(context).values("node", "") == []
    with pytest.raises(UnknownScenarioError, match="no branch 'b9'"):
        open_context(path, scenario=FABRIC_EXAMPLE, branch="b9")


def test_metric_rows_are_the_recorded_series(floats_recording: tuple[Path, dict[str, Any]]) -> None:
    path, report = floats_recording
    world = straight(FLOATS, report["config"], 5)
    assert world.metrics, "the floats scenario records metrics"
    with open_context(path, scenario=FLOATS) as context:
        values = RecordingValues(context)
        for name, series in world.metrics.items():
            assert values.metric_rows("main", name) == [list(point) for point in series]
        assert values.metric_rows("main", "no-such-metric") is None


# -- the CLI: one faults command for scenarios and recordings --------------------------------------


def test_the_faults_command_reads_a_recording_and_its_branches(
    fabric_run: tuple[Path, dict[str, Any], dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source, _report, _ = fabric_run
    path = tmp_path / "copy.ttr"
    shutil.copy(source, path)
    target = ["--scenario", "fabric_example:SCENARIO"]
    assert cli_main(["faults", str(path), *target, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    end_world = straight(FABRIC_EXAMPLE, FABRIC_CONFIG, FABRIC_SEED)
    assert (listing["branch"], listing["scenario"], listing["seed"]) == (
        "main",
        "fabric_example",
        FABRIC_SEED,
    )
    assert [(f["id"], f["hits"]) for f in listing["faults"]] == [
        (f["id"], end_world.fabric["fault_hits"].get(f["id"], 0)) for f in end_world.faults
    ]
    assert cli_main(["faults", str(path), *target, "--branch", "b1"]) == 0
    human = capsys.readouterr().out
    assert human.startswith(f"{path} (fabric_example seed 0) branch b1: {len(end_world.faults) - 1} faults")
    assert f" {DROPPED_FAULT} " not in human and "hits" in human

    assert cli_main(["faults", str(path), *target, "--branch", "b9"]) == 2
    assert "no branch 'b9'" in capsys.readouterr().err
    assert cli_main(["faults", str(path), "--seed", "3"]) == 2
    assert "--seed and --set apply to a scenario" in capsys.readouterr().err
    assert cli_main(["faults", "gossip", "--branch", "b1"]) == 2
    assert "--branch applies to a recording" in capsys.readouterr().err
    assert cli_main(["faults", str(tmp_path / "missing.ttr")]) == 2
    assert capsys.readouterr().err.startswith("timetravel: error: ")


def test_the_faults_command_still_draws_a_scenarios_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["fabric_example", "--scenario", "fabric_example:SCENARIO", "--seed", "0"]
    assert cli_main(["faults", *base, "--set", "faults=swarm", "--set", "faults_max=12", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    initial = build_world(FABRIC_EXAMPLE, FABRIC_CONFIG, FABRIC_SEED)
    assert listing["seed"] == 0 and [f["id"] for f in listing["faults"]] == [f["id"] for f in initial.faults]
    assert cli_main(["faults", "gossip"]) == 0
    assert capsys.readouterr().out == "gossip seed 0: no faults\n"
