"""check-determinism: same seed in several processes with different hash seeds; name the first divergence."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from subprocess import CompletedProcess

import pytest

from timetravel.cli import main
from timetravel.cli.check_determinism_command import TerminalProgress, _print_human
from timetravel.determinism import RunSpec, SeedRangeError, check_determinism, parse_seed_range
from timetravel.determinism.checker import (
    first_differing_batch,
    first_differing_record,
    group_hash_seeds,
    plan_groups,
)
from timetravel.determinism.diff import diff_values
from timetravel.determinism.processes import HASH_SEED_MAX, import_path
from timetravel.scenarios import get_scenario
from timetravel.scenarios.leaky import worker_names
from timetravel.sim import Simulation, format_time_auto

RunCli = Callable[..., CompletedProcess[str]]
EVENTS_PER_ROUND = 25
"""leaky with 8 workers: 1 start, 8 work, 8 finish, 8 done."""
LATENCY_NS = 1_000


def set_order(hash_seed: int) -> list[str]:
    """The order in which a process with this PYTHONHASHSEED iterates leaky's set of 8 workers."""
    code = "from timetravel.scenarios.leaky import worker_set; print(','.join(worker_set(8)))"
    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": str(hash_seed), "PYTHONPATH": import_path()},
    )
    return completed.stdout.strip().split(",")


def test_a_set_iterated_deep_into_a_run_is_caught_at_the_exact_first_divergent_event(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str]
) -> None:
    leak_round = 170  # past the first 4096-event chain batch
    settings = ["leak=set", "rounds=200", f"leak_from_round={leak_round}"]
    completed = run_cli(
        "check-determinism", "leaky", "--seeds", "3:4", *[f"--set={s}" for s in settings], "--json"
    )
    assert completed.returncode == 1, completed.stderr
    report = json.loads(completed.stdout)
    assert (report["seeds_checked"], report["consistent"], report["seeds"]) == (1, 0, [3, 4])
    [mismatch] = report["mismatches"]
    order_a, order_b = (set_order(hash_seed) for hash_seed in mismatch["hash_seeds"])
    assert sorted(order_a) == sorted(order_b) == sorted(worker_names(8))
    first = next(index for index in range(8) if order_a[index] != order_b[index])
    # Before the leaking round both processes agree; its "start" is event 25*170, at a time that a
    # clean run (leak=none: the same events up to there) tells us; its work arrives one latency later.
    scenario = get_scenario("leaky")
    clean = scenario.build(scenario.resolve_config(["rounds=200"]), 3)
    Simulation(scenario, clean).run(max_events=EVENTS_PER_ROUND * leak_round + 1)
    index = EVENTS_PER_ROUND * leak_round + 1 + first
    t_ns = clean.t_ns + LATENCY_NS
    assert mismatch["event_index"] == index and mismatch["chains_agree"] is False
    assert {key: mismatch["event"][key] for key in ("t_ns", "node", "kind", "seq")} == {
        "t_ns": t_ns,
        "node": order_a[first],
        "kind": "work",
        "seq": index,
    }
    assert {key: mismatch["other_event"][key] for key in ("t_ns", "node", "kind")} == {
        "t_ns": t_ns,
        "node": order_b[first],
        "kind": "work",
    }
    assert mismatch["reproducible"] is True  # hash order: a fresh process with the same hash seed repeats it
    # Right after that event one worker has started its round-170 work in one process and not yet in
    # the other (its service time is 500 ns in every round, so only the count differs).
    expected_diff = []
    for node in worker_names(8):
        if node in (order_a[first], order_b[first]):
            ahead = node == order_a[first]
            expected_diff.append(
                {"node": node, "path": "done", "a": leak_round + ahead, "b": leak_round + (not ahead)}
            )
    assert mismatch["state_diff"] == expected_diff
    assert mismatch["nodes_differing"] == [entry["node"] for entry in expected_diff]
    assert mismatch["parts_differing"] == ["nodes", "queue"]
    assert mismatch["state_events"] == [index + 1, index + 1]
    hash_a = mismatch["hash_seeds"][0]
    assert mismatch["reproduce"][0] == (
        f"PYTHONHASHSEED={hash_a} timetravel run leaky --seed 3 --set leak=set --set rounds=200 "
        f"--set leak_from_round={leak_round}"
    )
    _print_human({**report, "wall_s": 1.0}, "3:4")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"seed 3: MISMATCH at event {index}"
    assert (
        lines[2]
        == f"  PYTHONHASHSEED={hash_a:<10}  t={format_time_auto(t_ns)}  {order_a[first]}  work  (seq {index})"
    )
    assert lines[-1] == "1 seed checked: 0 consistent, 1 mismatching (1.0 s)"


def spec(leak: str, determinism: str | None = None) -> RunSpec:
    return RunSpec("leaky", None, (f"leak={leak}",), None, determinism)


@pytest.mark.parametrize("leak", ["clock", "random"])
def test_clock_and_global_random_are_deterministic_under_the_guard_and_not_without(leak: str) -> None:
    guarded = check_determinism(spec(leak), range(0, 1))
    assert (guarded["determinism"], guarded["consistent"], guarded["mismatches"]) == ("virtualize", 1, [])
    unguarded = check_determinism(spec(leak, "off"), range(0, 1))
    [mismatch] = unguarded["mismatches"]
    # The first 9 events (start, 8 works) do not read the leak; the first that does is a "finish".
    assert mismatch["event_index"] >= 9
    assert "finish" in {mismatch["event"]["kind"], mismatch["other_event"]["kind"]}
    assert mismatch["reproducible"] is False  # not hash order: a re-run with the same hash seed differs too
    assert any(entry["path"] == "service_ns" for entry in mismatch["state_diff"])


def test_a_leak_that_only_reaches_the_state_is_reported_with_the_final_state_diff() -> None:
    report = check_determinism(spec("stamp", "off"), range(0, 1))
    [mismatch] = report["mismatches"]
    assert mismatch["chains_agree"] is True
    assert mismatch["event"] is None and mismatch["event_index"] is None
    assert mismatch["parts_differing"] == ["nodes"]
    assert mismatch["nodes_differing"] == worker_names(8)
    assert [entry["path"] for entry in mismatch["state_diff"]] == ["stamp"] * 8
    assert all(entry["a"] > 1_600_000_000 and entry["a"] != entry["b"] for entry in mismatch["state_diff"])
    assert mismatch["state_events"] == [75, 75]


def test_consistent_seeds_exit_zero_with_the_json_contract(run_cli: RunCli) -> None:
    completed = run_cli("check-determinism", "leaky", "--seeds", "0:3", "--json")
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["seeds_checked"] == 3 and report["mismatches"] == [] and report["consistent"] == 3
    assert report["outcomes"] == {"pass": 3, "fail": 0}
    assert (report["scenario"], report["determinism"], report["runs_per_seed"]) == ("leaky", "virtualize", 2)
    assert completed.stderr == ""  # no progress line when stderr is not a terminal


def test_a_user_scenario_named_by_module_is_loaded_in_every_worker(run_cli: RunCli) -> None:
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "examples")
    target = "replicated_register:SCENARIO"
    completed = run_cli(
        "check-determinism",
        "replicated_register",
        "--scenario",
        target,
        "--seeds",
        "3:4",
        "--json",
        env={"PYTHONPATH": examples},
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert (report["consistent"], report["outcomes"]) == (1, {"pass": 0, "fail": 1})  # seed 3 fails, always
    mislabelled = run_cli(
        "check-determinism", "pingpong", "--scenario", target, "--seeds", "0:1", env={"PYTHONPATH": examples}
    )
    assert mislabelled.returncode == 2
    assert "is scenario 'replicated_register', not 'pingpong'" in mislabelled.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--seeds", "3:3"], "--seeds 3:3: the range is empty"),
        (["--seeds", "a:b"], "--seeds expects A:B"),
        (["--seeds", "0:2", "--processes", "0"], "--processes must be between 1 and 64"),
        (["--seeds", "0:2", "--runs", "1"], "--runs must be between 2 and 8"),
        (["--seeds", "0:2", "--set", "leak=sometimes"], "'sometimes' is not one of none, set"),
        (["--seeds", "0:2", "--timeout", "0"], "--timeout must be a positive number"),
        (["--seeds", "0:2", "--determinism", "strict"], "invalid choice: 'strict'"),
        (["--seeds", "0:2", "--timeout", "0.01"], "was stopped after its time budget (--timeout)"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_two(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["check-determinism", "leaky", *arguments])
    except SystemExit as exit_:  # argparse's own errors
        code = int(exit_.code or 0)
    error = capsys.readouterr().err
    assert code == 2
    assert error.startswith("timetravel: error: ") and error.count("\n") == 1
    assert message in error


def test_an_unknown_scenario_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-determinism", "nonesuch", "--seeds", "0:2"]) == 2
    assert "unknown scenario 'nonesuch'" in capsys.readouterr().err


# -- the pieces ----------------------------------------------------------------------------------


def test_seed_ranges_are_half_open() -> None:
    assert parse_seed_range("0:4") == range(0, 4)
    assert parse_seed_range("7") == range(7, 8)
    with pytest.raises(SeedRangeError):
        parse_seed_range("4:0")
    with pytest.raises(SeedRangeError, match="at most 1000000"):
        parse_seed_range("0:2000000")


def test_groups_cover_every_seed_once_and_hash_seeds_are_distinct() -> None:
    groups = plan_groups(range(5, 105), processes=2)
    assert [seed for group in groups for seed in group] == list(range(5, 105))
    assert max(len(group) for group in groups) == 25
    for group in groups:
        hash_seeds = group_hash_seeds(group[0], 8)
        assert len(set(hash_seeds)) == 8
        assert all(1 <= value <= HASH_SEED_MAX for value in hash_seeds)
    assert group_hash_seeds(5, 2) == group_hash_seeds(5, 2)  # a check can be repeated exactly


def test_first_differing_batch_and_record() -> None:
    run = {"digests": ["a", "b", "c"], "head": "h"}
    assert first_differing_batch(run, dict(run)) is None
    assert first_differing_batch(run, {"digests": ["a", "x", "c"], "head": "h2"}) == 1
    assert first_differing_batch(run, {"digests": ["a", "b"], "head": "h3"}) == 2
    assert first_differing_batch(run, {"digests": ["a", "b", "c"], "head": "h4"}) == 3
    records = [[1, 0, "n0", "k", "d"], [2, 1, "n1", "k", "d"]]
    assert first_differing_record(records, list(records)) is None
    assert first_differing_record(records, [records[0], [2, 1, "n2", "k", "d"]]) == 1
    assert first_differing_record(records, records[:1]) == 1


def test_state_diff_is_bit_exact_and_bounded() -> None:
    import numpy as np

    a = {"x": 1, "y": [1, 2, 3], "z": np.zeros(4), "zero": -0.0, "nan": float("nan"), "text": "ab"}
    b = {
        "x": 2,
        "y": [1, 2],
        "z": np.array([0.0, 0.0, 1.5, 0.0]),
        "zero": 0.0,
        "nan": float("nan"),
        "new": None,
    }
    assert diff_values(a, b) == [
        {"path": "x", "a": 1, "b": 2},
        {"path": "y[2]", "a": 3, "b": "<absent>"},
        {
            "path": "z",
            "a": "1 of 4 elements differ, first at (2,): 0.0",
            "b": "1 of 4 elements differ, first at (2,): 1.5",
        },
        {"path": "zero", "a": -0.0, "b": 0.0},
        {"path": "text", "a": "ab", "b": "<absent>"},
        {"path": "new", "a": "<absent>", "b": None},
    ]
    assert len(diff_values(list(range(100)), list(range(1, 101)), limit=5)) == 5


def test_progress_rewrites_one_line_and_clears_it() -> None:
    stream = io.StringIO()
    progress = TerminalProgress(stream)
    progress(1, 3, 0)
    progress(2, 3, 0)  # within the interval: not shown
    progress(3, 3, 1)
    progress.clear()
    assert stream.getvalue() == (
        "\rchecked 1/3 seeds, 0 mismatching\033[K"
        "\rchecked 3/3 seeds, 1 mismatching; locating divergences\033[K"
        "\r\033[K"
    )


def test_workers_import_what_the_parent_imports() -> None:
    path = import_path().split(os.pathsep)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert here in path  # the checkout under test, not some installed timetravel


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "settings"), [("pingpong", ("rounds=300",)), ("gossip", ("nodes=48", "rumors=12"))]
)
def test_the_built_in_scenarios_agree_across_processes(name: str, settings: tuple[str, ...]) -> None:
    seeds = range(0, 40 if os.environ.get("TIMETRAVEL_SLOW") == "full" else 4)
    report = check_determinism(RunSpec(name, None, settings, None, None), seeds, runs=3)
    assert report["mismatches"] == [] and report["consistent"] == len(seeds)
