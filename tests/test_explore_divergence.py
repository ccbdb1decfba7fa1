"""First divergence, compare, diff, fanout, likelihood and rerun, on gossip, needle and coin."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from explore_scenarios import CLOCK, FLIP_NS, LATE_FLIP, TICK_NS, TICK_TWICE, face
from explore_scenarios import SCENARIO as COIN

from timetravel.explore import Session
from timetravel.explore import rerun as rerun_module
from timetravel.explore.branching import branch
from timetravel.explore.commands import render_text
from timetravel.explore.compare import compare, diff
from timetravel.explore.divergence import first_divergence
from timetravel.explore.effects import effects_key
from timetravel.explore.fanout import fanout, likelihood, point_of_no_return
from timetravel.explore.replay import CAUSE_CODE_CHANGED
from timetravel.explore.rerun import rerun
from timetravel.explore.results import FanoutResult
from timetravel.explore.work import ExploreError, WorkStopped
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario

MS = 1_000_000
NEEDLE_SETTINGS = {"decoys": 5, "rounds": 12, "workers": 4}


@pytest.fixture(scope="module")
def needle_source(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    scenario = get_scenario("needle")
    path = tmp_path_factory.mktemp("needle") / "needle.ttr"
    report, world = record_run(
        scenario, scenario.resolve_config(NEEDLE_SETTINGS), 0, path, snapshot_every_events=64
    )
    return path, report, [dict(record) for record in world.faults]


@pytest.fixture
def needle(needle_source: Any, tmp_path: Path) -> Any:
    source, report, faults = needle_source
    path = tmp_path / "needle.ttr"
    shutil.copy(source, path)
    return path, report, faults


@pytest.fixture(scope="module")
def coin_seed() -> int:
    return next(seed for seed in range(100) if face(seed, 0) == 1)


@pytest.fixture
def coin(tmp_path: Path, coin_seed: int) -> tuple[Path, dict[str, Any]]:
    path = tmp_path / "coin.ttr"
    report, _world = record_run(COIN, COIN.resolve_config({}), coin_seed, path, snapshot_every_events=64)
    return path, report


def planted(faults: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (record,) = [record for record in faults if record["kind"] == kind]
    return record


# -- first divergence -----------------------------------------------------------------------------


def test_the_fix_diverges_at_the_restart_that_it_changes(needle: Any) -> None:
    """bug=none changes one thing: what the planted restart does to its worker. That event is the
    first divergence, on the victim, with the same seq on both sides; the diff is the worker's
    remembered round."""
    path, _report, faults = needle
    restart = planted(faults, "restart")
    with Session.open(path) as session:
        branch(session, "19ms", {"settings": ["bug=none"]})
        found = first_divergence(session, "main", "b1")
    assert found is not None
    assert (found.t_ns, found.node, found.kind) == (restart["t_start"], restart["target"], "fault")
    assert found.seq_a == found.seq_b and found.event_a == found.event_b
    assert found.reason == f"the state of {restart['target']} differs after it"
    assert [change["path"] for change in found.changes] == [f"nodes/{restart['target']}/applied_round"]


def test_a_dropped_fault_diverges_where_its_event_no_longer_runs(needle: Any) -> None:
    path, _report, faults = needle
    restart = planted(faults, "restart")
    with Session.open(path) as session:
        branch(session, "19ms", {"drop_faults": [restart["id"]]})
        found = first_divergence(session, "main", "b1")
        assert first_divergence(session, "b1", "b1") is None
    assert found is not None
    assert (found.t_ns, found.node, found.kind, found.seq_b, found.event_b) == (
        restart["t_start"],
        restart["target"],
        "fault",
        None,
        None,
    )
    assert found.reason == f"a runs fault on {restart['target']}, which b does not run at that time"
    assert f"nodes/{restart['target']}/applied_round" in [change["path"] for change in found.changes]


def test_a_new_branch_key_diverges_at_the_first_event_that_behaves_differently(
    gossip_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The divergence is minimal: after the event before it both worlds hold the same nodes and
    pending events (up to seq); after it they do not."""
    source, _report = gossip_recording
    path = tmp_path / "gossip.ttr"
    shutil.copy(source, path)
    with Session.open(path) as session:
        fork = branch(session, "#1500", {"branch_key": 9})
        found = first_divergence(session, "main", "b1")
        assert found is not None and found.event_a == found.event_b and found.seq_a == found.seq_b
        assert found.event_a is not None and found.event_a > 1500
        main, other = Session.open(path), Session.open(path, branch="b1")
        with main, other:
            main.goto_event(found.event_a - 1)
            other.goto_event(found.event_a - 1)
            assert effects_key(main.world) == effects_key(other.world)
            main.goto_event(found.event_a)
            other.goto_event(found.event_a)
            assert effects_key(main.world) != effects_key(other.world)
            assert main.event(found.event_a) == other.event(found.event_a)
    assert fork.at_ns <= found.t_ns


def test_compare_gives_outcomes_curves_and_the_divergence(
    coin: tuple[Path, dict[str, Any]], coin_seed: int
) -> None:
    path, report = coin
    key = next(key for key in range(1, 50) if face(coin_seed, key) == 0)
    with Session.open(path, scenario=COIN) as session:
        branch(session, "9ms", {"branch_key": key})
        result = compare(session, "main", "b1")
    assert (result.a.outcome, result.b.outcome) == ("fail", "pass")
    assert result.a.failure is not None and result.a.failure["signature"] == "assertion:coin.end"
    divergence = result.first_divergence
    assert divergence is not None
    assert (divergence.t_ns, divergence.node, divergence.kind) == (FLIP_NS, "coin", "flip")
    ticks = report["events"] - 1
    assert result.metrics["ticks"]["a"] == [[index * TICK_NS, 1.0] for index in range(ticks)]
    assert result.metrics["ticks"]["a"] == result.metrics["ticks"]["b"]
    assert result.to_data()["first_divergence"] == {
        "t_ns": FLIP_NS,
        "node": "coin",
        "kind": "flip",
        "seq_a": divergence.seq_a,
        "seq_b": divergence.seq_b,
        "event_a": divergence.event_a,
        "event_b": divergence.event_b,
    }


def test_the_end_of_run_check_is_a_divergence_of_its_own(coin: Any, coin_seed: int) -> None:
    """``strict`` is read by nobody, so the only difference of a branch that sets it is none."""
    path, _report = coin
    with Session.open(path, scenario=COIN) as session:
        branch(session, "9ms", {"settings": ["strict=on"]})
        assert first_divergence(session, "main", "b1") is None
        assert compare(session, "main", "b1").first_divergence is None


def test_diff_at_the_divergence_at_a_time_and_under_a_path(needle: Any) -> None:
    path, _report, faults = needle
    restart = planted(faults, "restart")
    victim = restart["target"]
    with Session.open(path) as session:
        branch(session, "19ms", {"settings": ["bug=none"]})
        at_divergence = diff(session, "main", "b1")
        assert at_divergence.at_ns == restart["t_start"] and at_divergence.first_divergence is not None
        assert [entry.path for entry in at_divergence.paths] == [
            "config/bug",
            f"nodes/{victim}/applied_round",
        ]
        later = diff(session, "main", "b1", at="25ms", path="nodes/*/total")
        assert later.first_divergence is None and later.at_ns == 25 * MS
        main, fixed = Session.open(path), Session.open(path, branch="b1")
        with main, fixed:
            main.goto("25ms")
            fixed.goto("25ms")
            expected = [
                f"nodes/{name}/total"
                for name in main.world.nodes
                if "total" in main.world.nodes[name]
                and main.world.nodes[name]["total"] != fixed.world.nodes[name]["total"]
            ]
        assert [entry.path for entry in later.paths] == expected
        assert all(entry.change == "changed" for entry in later.paths)
        limited = diff(session, "main", "b1", at="25ms", changes_max=1)
        assert len(limited.paths) == 1 and limited.omitted > 0
        with pytest.raises(ExploreError, match="no branch"):
            diff(session, "main", "b7")


# -- fanout and likelihood --------------------------------------------------------------------------


def test_fanout_counts_what_each_branch_key_draws(coin: Any, coin_seed: int) -> None:
    path, _report = coin
    samples = 12
    odd = sum(face(coin_seed, key) for key in range(1, samples + 1))
    with Session.open(path, scenario=COIN) as session:
        result = fanout(session, "9ms", samples)
        assert result.samples == samples and result.at_ns == 9 * MS
        assert result.failure_rate == odd / samples
        assert result.by_signature == {
            label: count
            for label, count in sorted(
                {"assertion:coin.end": odd, "pass": samples - odd}.items(),
                key=lambda item: (-item[1], item[0]),
            )
            if count
        }
        passing = tuple(key for key in range(1, samples + 1) if face(coin_seed, key) == 0)
        assert result.keys.get("pass", ()) == passing
        assert set(result.keys.get("assertion:coin.end", ())) == set(range(1, samples + 1)) - set(passing)
        if passing:
            keys_text = ", ".join(str(key) for key in passing[:10]) + (", ..." if len(passing) > 10 else "")
            assert f"  {len(passing):>5}  pass  (branch keys {keys_text})" in render_text(result)
        after = fanout(session, "11ms", 4)
        assert after.by_signature == {"assertion:coin.end": 4}
        kept = fanout(session, "9ms", 3, store=True)
        assert kept.samples == 3
        assert kept.failure_rate == sum(face(coin_seed, key) for key in (1, 2, 3)) / 3
        assert list(session.reader.catalog.branches) == ["b1", "b2", "b3"]
        assert [session.reader.catalog.branches[name]["branch_key"] for name in ("b1", "b2", "b3")] == [
            1,
            2,
            3,
        ]
        with pytest.raises(ExploreError, match="samples must be"):
            fanout(session, "9ms", 0)
        with pytest.raises(WorkStopped):
            fanout(session, "9ms", 3, should_stop=lambda: True)


def test_fanout_skips_the_parents_own_key(coin: Any, coin_seed: int) -> None:
    path, _report = coin
    with Session.open(path, scenario=COIN) as session:
        branch(session, "1ms", {"branch_key": 1})
        result = fanout(session, "9ms", 2, parent="b1", progress=(seen := []).append)
    assert [progress.detail.split(":")[0] for progress in seen] == ["key 2", "key 3"]
    assert result.failure_rate == (face(coin_seed, 2) + face(coin_seed, 3)) / 2


def test_likelihood_jumps_to_one_at_the_flip(coin: Any, coin_seed: int) -> None:
    path, _report = coin
    samples = 6
    rate_before = sum(face(coin_seed, key) for key in range(1, samples + 1)) / samples
    with Session.open(path, scenario=COIN) as session:
        snapshots = [info for info in session.snapshots() if info.events < session.end.events]
        result = likelihood(session, samples)
    assert [point.at_ns for point in result.points] == [info.t_ns for info in snapshots]
    assert [point.failure_rate for point in result.points] == [
        rate_before if info.t_ns < FLIP_NS else 1.0 for info in snapshots
    ]
    first_after = min(info.t_ns for info in snapshots if info.t_ns >= FLIP_NS)
    assert result.point_of_no_return_ns == (first_after if rate_before < 1.0 else 0)
    with Session.open(path, scenario=COIN) as session:
        window = likelihood(session, 2, start="5ms", end=first_after)
        assert [point.at_ns for point in window.points] == [
            info.t_ns for info in snapshots if 5 * MS <= info.t_ns <= first_after
        ]
        with pytest.raises(ExploreError, match="no snapshot of main before its end in that window"):
            likelihood(session, 2, start="19.9ms")


def test_point_of_no_return_is_where_the_rate_reaches_one_and_stays() -> None:
    def point(t_ns: int, rate: float) -> FanoutResult:
        return FanoutResult(t_ns, 4, rate, {})

    assert point_of_no_return([point(0, 0.5), point(10, 1.0), point(20, 0.75), point(30, 1.0)]) == 30
    assert point_of_no_return([point(0, 1.0), point(10, 1.0)]) == 0
    assert point_of_no_return([point(0, 1.0), point(10, 0.0)]) is None
    assert point_of_no_return([]) is None


# -- rerun -------------------------------------------------------------------------------------------


def test_rerun_with_the_fix_passes_and_names_the_divergence(needle: Any) -> None:
    path, report, faults = needle
    restart = planted(faults, "restart")
    with Session.open(path) as session:
        fixed = rerun(session, ["bug=none"])
        same = rerun(session)
    assert (fixed.outcome, fixed.recorded_outcome, fixed.settings) == ("pass", "fail", ("bug=none",))
    assert fixed.choices == "seed" and fixed.faults_pinned == len(faults)
    divergence = fixed.first_divergence
    assert divergence is not None and (divergence.t_ns, divergence.node) == (
        restart["t_start"],
        restart["target"],
    )
    assert same.outcome == "fail" and same.first_divergence is None
    assert same.failure == report["failure"] and same.events == report["events"]


def test_rerun_pins_logged_choices_by_site(tmp_path: Path, coin_seed: int) -> None:
    """With a choice log, today's code drawing the coin with 4 sides still gets the recorded face
    (modulo 4); without one, the seed draws again with the new bound."""
    logged, plain = tmp_path / "logged.ttr", tmp_path / "plain.ttr"
    config = COIN.resolve_config({})
    record_run(COIN, config, coin_seed, logged, snapshot_every_events=64, record_choices=True)
    record_run(COIN, config, coin_seed, plain, snapshot_every_events=64)
    with Session.open(logged, scenario=COIN) as session:
        from_log = rerun(session, ["sides=4"])
    with Session.open(plain, scenario=COIN) as session:
        from_seed = rerun(session, ["sides=4"])
    assert (from_log.choices, from_seed.choices) == ("log", "seed")
    assert from_log.outcome == "fail"
    assert from_seed.outcome == ("fail" if face(coin_seed, 0, 4) % 2 == 1 else "pass")


def test_rerun_on_changed_code_compares_with_the_recorded_data(
    coin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the code changed, the recording cannot be re-executed beside the rerun: a state-only
    change is placed at the first event on the node whose state differs at the next snapshot,
    and an event-stream change at the first event that differs."""
    path, _report = coin
    monkeypatch.setattr(rerun_module, "classify", lambda header, scenario: CAUSE_CODE_CHANGED)
    with Session.open(path, scenario=TICK_TWICE) as session:
        state_only = rerun(session)
    divergence = state_only.first_divergence
    assert divergence is not None
    assert (divergence.t_ns, divergence.node, divergence.kind, divergence.event_a) == (0, CLOCK, "tick", 1)
    assert "the state of clock differs at snapshot #64" in divergence.reason
    with Session.open(path, scenario=LATE_FLIP) as session:
        late = rerun(session)
    divergence = late.first_divergence
    assert divergence is not None
    flips_at = FLIP_NS // TICK_NS + 1
    assert (divergence.t_ns, divergence.node, divergence.kind, divergence.event_b) == (
        FLIP_NS,
        CLOCK,
        "tick",
        flips_at,
    )
    assert divergence.reason == (
        f"the recording runs flip on coin at t={FLIP_NS} ns; today's code runs tick on clock at t={FLIP_NS} ns "
        f"(event #{flips_at})"
    )


def test_rerun_bisects_the_recorded_snapshots_before_stepping(
    gossip_recording: tuple[Path, dict[str, Any]],
) -> None:
    """coverage_min is read only by the end-of-run check: the rerun agrees with the recording at
    every snapshot, so the search steps only from the last one, to the end-of-run checks."""
    path, report = gossip_recording
    seen: list[Any] = []
    with Session.open(path) as session:
        last = max(info.events for info in session.snapshots() if info.events < report["events"])
        result = rerun(session, ["coverage_min=0.5"], progress=seen.append)
    assert (result.outcome, result.recorded_outcome) == ("pass", "fail")
    divergence = result.first_divergence
    assert divergence is not None and (divergence.kind, divergence.node, divergence.t_ns) == (
        "end",
        "",
        report["t_end_ns"],
    )
    assert divergence.reason.startswith("its failures differ (a: assertion:gossip.coverage on load; b: none)")
    steps = {
        progress.detail
        for progress in seen
        if progress.task == "divergence" and progress.detail.startswith("stepping")
    }
    assert steps == {f"stepping from #{last}"}
