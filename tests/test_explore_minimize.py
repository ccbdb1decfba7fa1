"""The minimizer: exact on a planted two-fault bug, keeps the signature, shrinks choices, respects budgets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_explore_minimize_run import JSON_KEYS

from timetravel.explore.minimize import ddmin, minimize
from timetravel.explore.minimize_trials import (
    STOP_CANCELLED,
    STOP_FIXPOINT,
    STOP_MAX_RUNS,
    STOP_MAX_STALL,
    Budget,
    ChoicePins,
    NothingToMinimize,
    Progress,
)
from timetravel.explore.repro import write_pytest
from timetravel.scenarios import get_scenario
from timetravel.scenarios.needle import PERIOD_NS
from timetravel.sim import Context, Event, Param, Scenario, Simulation, World
from timetravel.sim.runner import build_world, run_report

NEEDLE = get_scenario("needle")
SIGNATURE = "assertion:needle.total"


def needle_config(**settings: Any) -> dict[str, Any]:
    return NEEDLE.resolve_config(settings)


def schedule(seed: int) -> list[dict[str, Any]]:
    return build_world(NEEDLE, needle_config(), seed).faults


def planted(seed: int) -> list[dict[str, Any]]:
    return [record for record in schedule(seed) if record["kind"] in ("drop", "restart")]


def outcome(seed: int, **settings: Any) -> str | None:
    report, _ = run_report(NEEDLE, needle_config(**settings), seed)
    return None if report["failure"] is None else report["failure"]["signature"]


# -- the test bed: the decoys cannot cause the failure, the planted pair always does -------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_needle_fails_only_with_both_planted_faults(seed: int) -> None:
    records = schedule(seed)
    pair = planted(seed)
    decoys = [record for record in records if record not in pair]
    assert len(records) == 102 and len(pair) == 2 and len(decoys) == 100
    assert [record["id"] for record in records] == [f"f{n}" for n in range(1, 103)]
    assert outcome(seed) == SIGNATURE
    assert outcome(seed, faults=pair) == SIGNATURE
    assert outcome(seed, faults=decoys) is None
    assert outcome(seed, faults=decoys + pair[:1]) is None
    assert outcome(seed, faults=decoys + pair[1:]) is None
    assert outcome(seed, bug="none") is None


def test_explicit_schedule_reproduces_the_drawn_one_exactly() -> None:
    drawn, _ = run_report(NEEDLE, needle_config(), 0)
    explicit, _ = run_report(NEEDLE, needle_config(faults=schedule(0)), 0)
    assert (explicit["failure"], explicit["events"]) == (drawn["failure"], drawn["events"])


# -- ddmin -------------------------------------------------------------------------------------


def test_ddmin_finds_a_one_minimal_pair() -> None:
    calls: list[list[int]] = []

    def test(subset: list[int]) -> bool:
        calls.append(subset)
        return 17 in subset and 83 in subset

    assert ddmin(list(range(100)), test) == [17, 83]
    assert len(calls) < 100


def test_ddmin_keeps_order_and_handles_single_culprit() -> None:
    assert ddmin(list("abcdefgh"), lambda subset: "f" in subset) == ["f"]
    assert ddmin(list("abcdefgh"), lambda subset: {"b", "c", "g"} <= set(subset)) == ["b", "c", "g"]


# -- minimizing the planted bug -----------------------------------------------------------------


def test_minimize_keeps_exactly_the_planted_pair_and_shrinks_the_world() -> None:
    progress: list[Progress] = []
    result = minimize(NEEDLE, needle_config(), 0, progress=progress.append)
    pair = planted(0)
    victim_index = int(pair[0]["target"][1:])
    planted_round = pair[0]["t_start"] // PERIOD_NS
    assert result.signature == SIGNATURE
    assert sorted(result.faults_kept) == sorted(record["id"] for record in pair)
    assert (result.faults_before, result.faults_after) == (102, 2)
    assert result.stopped_by == STOP_FIXPOINT
    assert result.runs <= 300
    # the victim must exist and the planted round must run: nothing smaller can fail
    assert result.config["workers"] == victim_index + 1
    assert result.config["rounds"] == planted_round + 1
    assert result.choices_before > 0 and result.choices_after == 0
    assert result.zero_sites == ("net.jitter",)
    # the drop window shrinks to the one ack it must catch: sent one latency after the round starts
    drop = next(record for record in result.config["faults"] if record["kind"] == "drop")
    assert drop["t_end"] - drop["t_start"] == result.config["latency"]
    assert [p.runs for p in progress] == list(range(1, result.runs + 1))
    assert result.to_data().keys() == JSON_KEYS


def test_minimized_run_replays_with_plain_overrides_and_with_the_compact_form() -> None:
    result = minimize(NEEDLE, needle_config(), 1)
    scenario_config = NEEDLE.resolve_config(result.config)
    plain = Simulation(NEEDLE, build_world(NEEDLE, scenario_config, 1), overrides=result.overrides).run()
    compact = Simulation(
        NEEDLE, build_world(NEEDLE, scenario_config, 1), overrides=result.choice_pins()
    ).run()
    assert plain.failure == compact.failure == result.failure
    assert plain.events == compact.events


def test_budget_stops_with_the_best_result_so_far() -> None:
    result = minimize(NEEDLE, needle_config(), 0, budget=Budget(max_runs=12))
    assert result.stopped_by == STOP_MAX_RUNS
    assert result.runs == 12
    assert result.faults_after < result.faults_before
    replay, _ = run_report(NEEDLE, NEEDLE.resolve_config(result.config), 0)
    assert replay["failure"]["signature"] == SIGNATURE


def test_stall_budget_and_cancellation() -> None:
    stalled = minimize(NEEDLE, needle_config(), 0, budget=Budget(max_stall=3))
    assert stalled.stopped_by == STOP_MAX_STALL
    calls = []
    cancelled = minimize(
        NEEDLE, needle_config(), 0, progress=calls.append, should_stop=lambda: len(calls) >= 5
    )
    assert cancelled.stopped_by == STOP_CANCELLED
    assert cancelled.runs == 5


def test_a_passing_run_or_another_signature_is_refused() -> None:
    with pytest.raises(NothingToMinimize, match="does not fail"):
        minimize(NEEDLE, needle_config(bug="none"), 0)
    with pytest.raises(NothingToMinimize, match="not with"):
        minimize(NEEDLE, needle_config(), 0, signature="hang:needle.round")


# -- the signature keeps the minimizer on one bug -----------------------------------------------


def _two_bugs_fault(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["applied"].append(event.payload["kind"])


def _two_bugs_end(world: World, ctx: Context) -> None:
    applied = world.nodes["n"]["applied"]
    if "a" in applied and "b" in applied:
        ctx.fail("assertion", "a and b together", site="both", node="n")
    elif "a" in applied:
        ctx.fail("assertion", "a alone", site="only_a", node="n")


def _two_bugs_build(config: dict[str, Any], seed: int) -> World:
    world = World("two_bugs", config, seed)
    world.add_node("n", "n", {"applied": []})
    world.faults = list(config["faults"])
    for record in world.faults:
        world.schedule(record["t_start"], "n", "fault", record)
    return world


TWO_BUGS = Scenario(
    name="two_bugs",
    summary="fault a alone fails one way, a with b another",
    params=(Param("faults", "json", [], "the schedule"),),
    build=_two_bugs_build,
    handlers={"n": {"fault": _two_bugs_fault}},
    on_end=_two_bugs_end,
)


def test_minimizer_never_slips_to_another_signature() -> None:
    records = [
        {"id": f"f{n}", "kind": kind, "target": "n", "t_start": n, "t_end": n, "params": {}}
        for n, kind in enumerate(["c", "a", "c", "b", "c"], start=1)
    ]
    config = TWO_BUGS.resolve_config({"faults": records})
    result = minimize(TWO_BUGS, config, 0)
    assert result.signature == "assertion:both"
    assert result.faults_kept == ("f2", "f4")


# -- choices towards 0 --------------------------------------------------------------------------


def test_choices_shrink_to_the_smallest_failing_jitter() -> None:
    """pingpong fails when a round trip exceeds rtt_max: 2 x 1000 ns latency + two jitter draws.

    With rtt_max = 2300 ns the two jitters of the failing round must add up to more than 300 ns;
    every other jitter can be 0, and bisection brings the sum down to exactly 301 ns.
    """
    pingpong = get_scenario("pingpong")
    config = pingpong.resolve_config(["rtt_max=2300ns", "rounds=50"])
    result = minimize(pingpong, config, 2)
    assert result.signature == "assertion:pingpong.rtt_max"
    assert result.choices_before > 2
    assert result.choices_after == 2
    assert "took 2301 ns" in result.failure["message"]


def test_choice_pins_answer_zero_for_zeroed_sites_only() -> None:
    pins = ChoicePins([(("n", "a", 3), 7)], ["z"])
    assert pins.get(("n", "a", 3)) == 7
    assert pins.get(("n", "a", 4)) is None
    assert pins.get(("m", "z", 99)) == 0
    assert bool(ChoicePins([], ["z"])) and not bool(ChoicePins([], []))


# -- the standalone pytest file ------------------------------------------------------------------


def test_written_pytest_file_runs_standalone_red_with_the_bug_green_once_fixed(tmp_path: Path) -> None:
    result = minimize(NEEDLE, needle_config(), 0)
    path = Path(write_pytest(result, tmp_path / "test_repro.py"))
    root = Path(__file__).resolve().parent.parent

    def run_it() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
            cwd=tmp_path,
            env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
        )

    red = run_it()
    assert red.returncode == 1 and f"fails with {SIGNATURE} (recorded: {SIGNATURE})" in red.stdout, red.stdout
    source = path.read_text()
    assert source.count('"bug": "replay_after_restart"') == 1
    path.write_text(source.replace('"bug": "replay_after_restart"', '"bug": "none"'))  # the fix
    green = run_it()
    assert green.returncode == 0, green.stdout + green.stderr
    assert "1 passed" in green.stdout
