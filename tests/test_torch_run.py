"""The user's own torch.distributed script under the simulator: real torch, real rank processes.

These tests run in CI (torch is pinned in the dev extra); a missing torch is an import error here,
never a skip.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_launch import simulate_world
from torch_recordings import DDP_MLP, ROOT, TIMETRAVEL, real_torchrun, record_torchrun, torchrun_json

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.sim.scenario import ConfigError

SCRIPTS = ROOT / "tests" / "torch_scripts"


def simulate(script: Path, nproc: int = 4, seed: int = 0, *settings: str) -> dict:
    return simulate_world(script, nproc, seed, *settings)[0]


def test_ddp_training_is_bit_for_bit_repeatable() -> None:
    first = simulate(DDP_MLP, 4, 0, "args=--steps 6")
    second = simulate(DDP_MLP, 4, 0, "args=--steps 6")
    assert first["outcome"] == "pass", first["failure"]
    assert first["summary"]["optimizer_steps"] == 6
    assert first["hash_chain"] == second["hash_chain"]
    assert first["state_hash"] == second["state_hash"]


def test_another_seed_orders_arrivals_differently() -> None:
    zero = simulate(DDP_MLP, 4, 0, "args=--steps 2")
    one = simulate(DDP_MLP, 4, 1, "args=--steps 2")
    assert zero["outcome"] == one["outcome"] == "pass"
    assert zero["hash_chain"] != one["hash_chain"]  # the compute jitter is a seeded choice


def test_every_collective_has_torch_semantics() -> None:
    report = simulate(SCRIPTS / "collectives_all.py", 4)
    assert report["outcome"] == "pass", report["failure"]


def test_module_globals_are_per_rank_as_under_torchrun() -> None:
    # ranks are processes: a module that reads RANK at import sees its own rank (thread ranks gave 4.0)
    result = subprocess.run(
        [*TIMETRAVEL, "torchrun", "--nproc-per-node", "4", str(SCRIPTS / "rank_at_import.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if "sum" in line) == [
        f"[r{rank}] sum 6.0" for rank in range(4)
    ]


def test_a_rank_that_exits_early_is_a_hang_naming_it() -> None:
    report = simulate(SCRIPTS / "early_exit.py", 4)
    failure = report["failure"]
    assert failure["kind"] == "hang"
    assert failure["node"] == "r1"
    assert "r1 had already exited" in failure["message"]


def test_planted_nan_is_found_where_it_enters() -> None:
    report = simulate(DDP_MLP, 4, 0, "args=--steps 9 --bug nan_data")
    failure = report["failure"]
    assert failure["kind"] == "nan"
    assert failure["node"] == "r2"
    assert failure["signature"] == "nan:torch.collective.nonfinite"


def test_a_skipped_collective_is_a_mismatch_naming_the_rank() -> None:
    report = simulate(DDP_MLP, 4, 0, "args=--steps 7 --bug skip_collective")
    failure = report["failure"]
    assert failure["kind"] == "collective_mismatch"
    assert failure["node"] == "r1"


def test_a_script_exception_is_one_failure_with_its_place() -> None:
    result = subprocess.run(
        [*TIMETRAVEL, "torchrun", "--nproc-per-node", "2", "--json", str(SCRIPTS / "raises.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["failure"]["kind"] == "exception"
    assert report["failure"]["node"] == "r1"
    assert "raises.py:5" in report["failure"]["message"]
    assert (
        "Traceback" not in result.stderr
    )  # no traceback of timetravel's or of any rank reaches the terminal


def test_init_process_group_twice_is_an_exception() -> None:
    report = simulate(SCRIPTS / "init_twice.py", 2)
    assert report["failure"]["kind"] == "exception"
    assert "twice" in report["failure"]["message"]


def test_same_bits_in_another_process_with_another_hash_seed() -> None:
    here = simulate(DDP_MLP, 2, 3, "args=--steps 3")
    arguments = ["--nproc-per-node", "2", "--seed", "3", "--set", "rank_output=quiet"]
    there = torchrun_json([*arguments, str(DDP_MLP), "--steps", "3"], "12345", timeout_s=300)
    assert there["hash_chain"] == here["hash_chain"]
    assert there["state_hash"] == here["state_hash"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--nproc-per-node", "0", "x.py"], "--nproc-per-node must be between"),
        (["missing.py"], "is not a file"),
        (["README.md"], "is not a Python file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(arguments: list[str], message: str) -> None:
    result = subprocess.run(
        [*TIMETRAVEL, "torchrun", *arguments], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_script_not_named_on_the_command_line_never_runs() -> None:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={SCRIPTS / 'never_named.py'}"])
    (SCRIPTS / "never_named.py").exists() or pytest.fail("fixture script missing")
    with pytest.raises(ConfigError, match="was not named on the command line"):
        run_report(scenario, config, 0)


def test_the_losses_match_real_torchrun_with_gloo() -> None:
    steps = ["--steps", "6"]
    real = real_torchrun(DDP_MLP, 2, steps)
    assert real.returncode == 0, real.stderr[-2000:]
    simulated = subprocess.run(
        [*TIMETRAVEL, "torchrun", "--nproc-per-node", "2", str(DDP_MLP), *steps],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert simulated.returncode == 0, simulated.stderr
    real_loss = float(real.stdout.strip().splitlines()[-1].split()[-1])
    simulated_loss = float(
        next(line for line in simulated.stdout.splitlines() if "final loss" in line).split()[-1]
    )
    assert simulated_loss == pytest.approx(real_loss, rel=1e-5)


def _with_fault(record: dict, steps: int = 8) -> dict:
    return simulate(DDP_MLP, 4, 0, f"args=--steps {steps}", "faults=" + json.dumps([record]))


def test_a_bit_flip_in_one_rank_s_result_makes_that_replica_diverge() -> None:
    report = _with_fault(
        {
            "kind": "corrupt",
            "target": "r3",
            "t_start": 1_000_000,
            "params": {"side": "result", "numel_min": 2},
        }
    )
    failure = report["failure"]
    assert failure["kind"] == "divergence"
    assert failure["node"] == "r3"
    assert "than the other 3 members" in failure["message"]


def test_a_dropped_contribution_hangs_the_collective() -> None:
    record = {"kind": "drop", "target": "r2", "t_start": 1_000_000}
    _report, world = simulate_world(DDP_MLP, 4, 0, "args=--steps 8", "faults=" + json.dumps([record]))
    failure = world.failures[0]
    assert (failure["kind"], failure["node"]) == ("hang", "r2")
    assert failure["waiting_for"] == ["r2"]
    assert [row["rank"] for row in failure["flight_recorder"]] == ["r0", "r1", "r2", "r3"]


def test_a_crash_fault_kills_the_rank_at_its_next_collective() -> None:
    failure = _with_fault({"kind": "crash", "target": "r1", "t_start": 1_000_000})["failure"]
    assert (failure["kind"], failure["node"], failure["signature"]) == (
        "crash",
        "r1",
        "crash:torch.fault.crash",
    )


def test_a_straggler_slows_the_job_but_not_its_numbers() -> None:
    healthy = simulate(DDP_MLP, 4, 0, "args=--steps 4")
    slow = simulate(
        DDP_MLP, 4, 0, "args=--steps 4", "faults=" + json.dumps([{"kind": "slow", "target": "r1"}])
    )
    assert slow["outcome"] == healthy["outcome"] == "pass"
    assert slow["t_end_ns"] > 5 * healthy["t_end_ns"]


def test_a_bad_fault_record_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"fault f1: target must be a rank r0\.\.r3"):
        simulate(DDP_MLP, 4, 0, "faults=" + json.dumps([{"kind": "crash", "target": "r9"}]))


def test_a_torch_recording_opens_for_inspection_but_never_runs_its_script(tmp_path: Path) -> None:
    recording = tmp_path / "run.ttr"
    recorded = record_torchrun(recording, DDP_MLP)
    assert recorded.returncode == 0, recorded.stderr
    inspected = subprocess.run(
        [*TIMETRAVEL, "inspect", str(recording), "--path", "nodes/c10d/completed"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert inspected.returncode == 0, inspected.stderr
    replayed = subprocess.run(
        [*TIMETRAVEL, "replay", str(recording)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert replayed.returncode == 2
    assert "this is a recording of a torch script: pass --script PATH" in replayed.stderr
    assert len(replayed.stderr.strip().splitlines()) == 1


NAN_DATA_SWEEP = [
    *TIMETRAVEL,
    "fuzz",
    "torch",
    "--set",
    f"script={DDP_MLP}",
    "--set",
    "nproc=3",
    "--set",
    "args=--steps 9 --bug nan_data",
    "--set",
    "rank_output=quiet",
    "--seeds",
    "0:2",
    "--no-swarm",
]
"""Two seeds of the DDP example with its NaN planted on rank 2: both fail, in one bucket."""


def nan_data_sweep(tmp_path: Path, database: str, *options: str) -> subprocess.CompletedProcess[str]:
    """NAN_DATA_SWEEP into ``database`` with ``options``, recording failures under tmp_path/recs."""
    return subprocess.run(
        [*NAN_DATA_SWEEP, *options, "--db", database, "--json", "--record-failures", str(tmp_path / "recs")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


@pytest.mark.slow
def test_fuzz_sweeps_a_torch_script_and_verify_runs_only_the_script_you_name(tmp_path: Path) -> None:
    database = str(tmp_path / "f.db")
    result = nan_data_sweep(tmp_path, database, "--workers", "1")
    assert result.returncode in (0, 1), result.stderr
    summary = json.loads(result.stdout)
    assert summary["outcomes"] == {"fail": 2}
    assert list(summary["signatures"]) == ["nan:torch.collective.nonfinite"]
    # the earliest failing seeds, recorded by workers that may run the script the command line named
    recorded = summary["recordings"]
    assert recorded and all(entry["path"] is not None for entry in recorded), recorded
    verify = [
        *TIMETRAVEL,
        "verify",
        "--bucket",
        "nan:torch.collective.nonfinite",
        "--db",
        database,
        "--workers",
        "1",
    ]
    refused = subprocess.run(verify, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert refused.returncode == 2
    assert "pass --script PATH" in refused.stderr
    fixed = tmp_path / "ddp_mlp_fixed.py"
    fixed.write_text(DDP_MLP.read_text().replace('inputs[0, 0] = float("nan")', "pass"))
    verified = subprocess.run(
        [*verify, "--script", str(fixed), "--json"], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["fixed"] == 2


def test_fsdp2_and_functional_collectives_run_through_the_simulator() -> None:
    report = simulate(SCRIPTS / "fsdp2_adam.py", 2)
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["collectives"] > 10  # all-gathers and reduce-scatters of every step
    assert report["summary"]["optimizer_steps"] == 3


TINY_GPT = ROOT / "docs" / "examples" / "torch" / "tiny_gpt.py"


def test_the_transformer_example_trains_and_its_planted_bugs_are_found() -> None:
    assert simulate(TINY_GPT, 2, 0, "args=--steps 3")["outcome"] == "pass"
    mismatch = simulate(TINY_GPT, 2, 0, "args=--steps 3 --bug broadcast_loss")["failure"]
    assert mismatch["kind"] == "collective_mismatch"  # two ranks: no majority, both sides are named
    assert "broadcast(root 0)" in mismatch["message"] and "all_reduce(sum)" in mismatch["message"]
    drift = simulate(TINY_GPT, 2, 0, "args=--steps 3 --bug lr_per_rank")["failure"]
    assert drift["kind"] == "divergence"
    assert "parameter token.weight" in drift["message"]


def test_a_fork_after_init_is_a_warning_and_the_child_stays_off_the_channel() -> None:
    report = simulate(SCRIPTS / "fork_after_init.py", 2)
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["warnings"] == ["fork_after_init"]


def test_a_subprocess_warns_only_when_it_cannot_take_the_vfork_path() -> None:
    """subprocess.run spawns without running Python in a copy of the rank; a preexec_fn forks for real."""
    plain = simulate(SCRIPTS / "subprocess_after_init.py", 2, 0, "args=plain")
    assert plain["outcome"] == "pass", plain["failure"]
    assert plain["summary"]["warnings"] == []
    forked = simulate(SCRIPTS / "subprocess_after_init.py", 2, 0, "args=preexec")
    assert forked["outcome"] == "pass", forked["failure"]
    assert forked["summary"]["warnings"] == ["fork_after_init"]


@pytest.mark.slow
@pytest.mark.parametrize("script", ["set_order_leak.py", "threaded_collectives.py"])
def test_check_determinism_proves_a_torch_run_does_not_depend_on_the_caller_s_hash_seed(script: str) -> None:
    """The ranks' PYTHONHASHSEED is the run's python_hash_seed, not the caller's: a script that iterates
    a set of strings, or that issues collectives from three threads (refused, unsupported), gives one
    hash chain in three processes with different PYTHONHASHSEED (issue 32)."""
    checked = subprocess.run(
        [
            *TIMETRAVEL,
            "check-determinism",
            "torch",
            "--set",
            f"script={SCRIPTS / script}",
            "--set",
            "nproc=2",
            "--set",
            "rank_output=quiet",
            "--seeds",
            "0:1",
            "--runs",
            "3",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    report = json.loads(checked.stdout)
    assert report["mismatches"] == [], report["mismatches"]
    assert checked.returncode == 0, checked.stderr[-2000:]


FSDP2_GPT = ROOT / "docs" / "examples" / "torch" / "fsdp2_gpt.py"


def test_fsdp2_example_trains_and_its_to_empty_bug_is_a_nan_at_the_first_collective() -> None:
    assert simulate(FSDP2_GPT, 2, 0, "args=--steps 2")["outcome"] == "pass"
    failure = simulate(FSDP2_GPT, 2, 0, "args=--steps 2 --bug forget_layernorm")["failure"]
    assert failure["kind"] == "nan"
    assert "into all_gather" in failure["message"]  # FSDP2 gathers the uninitialised shard before any maths


def test_max_restarts_restarts_every_rank_and_the_script_resumes(tmp_path: Path) -> None:
    script = SCRIPTS / "resume_after_crash.py"
    without = simulate(script, 2, 0, f"args={tmp_path / 'a'}")
    (tmp_path / "a").mkdir(exist_ok=True)
    failed = simulate(script, 2, 0, f"args={tmp_path / 'a'}")
    assert failed["failure"]["kind"] == "crash" and failed["failure"]["node"] == "r1"
    (tmp_path / "b").mkdir()
    restarted = simulate(script, 2, 0, f"args={tmp_path / 'b'}", "max_restarts=1")
    assert restarted["outcome"] == "pass", restarted["failure"]
    assert restarted["summary"]["restarts"] == 1
    assert without["outcome"] == "fail"  # no folder to checkpoint into: the script raises


GPU_STYLE = ROOT / "docs" / "examples" / "torch" / "gpu_style.py"


def test_a_script_written_for_gpus_runs_unchanged_and_its_inf_is_traced_to_the_rank() -> None:
    assert simulate(GPU_STYLE, 2, 0, "args=--steps 3")["outcome"] == "pass"
    failure = simulate(GPU_STYLE, 2, 0, "args=--steps 6 --bug nan_scale")["failure"]
    assert (failure["kind"], failure["node"]) == ("nan", "r1")


@pytest.mark.slow
def test_a_dask_sweep_runs_and_records_the_script_the_command_line_named(tmp_path: Path) -> None:
    # Dask workers are not forked from the command: the script's opt-in travels in each job
    result = nan_data_sweep(tmp_path, str(tmp_path / "d.db"), "--dask", "local")
    summary = json.loads(result.stdout)
    assert summary["outcomes"] == {"fail": 2}, result.stderr[-2000:]
    assert summary["recordings"] and all(entry["path"] for entry in summary["recordings"]), summary[
        "recordings"
    ]


def test_a_dropped_contribution_s_hang_names_who_waits_for_the_dropped_rank() -> None:
    # r1's contribution is dropped: r1 waits in no collective; the others wait for it (it was once
    # reported as "r1 waited 600 s" with nobody to wait for)
    faults = json.dumps([{"kind": "drop", "target": "r1", "t_start": 1_000_000}])
    report, world = simulate_world(DDP_MLP, 3, 0, "args=--steps 6", f"faults={faults}")
    failure = world.failures[0]
    assert report["outcome"] == "fail" and failure["kind"] == "hang"
    assert failure["node"] == "r1" and failure["waiting_for"] == ["r1"]
    assert failure["waiting"] in ("r0", "r2") and "waiting for r1" in failure["message"]
