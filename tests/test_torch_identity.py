"""What a rank's run must not depend on: the host's pids and the caller's PYTHONHASHSEED (issue 32, item 2).

CPython draws its string hash secret when a process starts; every rank is a fork of one zygote, which
the coordinator starts with ``PYTHONHASHSEED`` set to the run's ``python_hash_seed`` (default 0, stored
in the recording's header with the rest of the config). ``os.getpid()`` in a rank is a logical pid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from timetravel.recording.reader import RecordingReader
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.torch.rank.env.identity import LOGICAL_PID_FIRST, install_identity, logical_pid
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "torch_scripts"
CALLER_HASH_SEEDS = ("1", "2")
"""Two shells' PYTHONHASHSEED under which set_order_leak.py's set of four names iterates differently."""


def run(script: Path) -> dict:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", "nproc=2", "rank_output=quiet"])
    return run_report(scenario, config, 0, launch=launch_naming([str(script)]))[0]


def test_a_script_that_all_reduces_its_pid_gives_the_same_hash_chain_every_run() -> None:
    first, second = run(SCRIPTS / "uses_pid.py"), run(SCRIPTS / "uses_pid.py")
    assert first["outcome"] == "pass", first["failure"]
    assert (first["hash_chain"], first["state_hash"]) == (second["hash_chain"], second["state_hash"])


def test_the_logical_pid_is_the_rank_s_own_and_a_forked_child_keeps_its_real_one() -> None:
    real = os.getpid()
    with install_identity(rank=3, restarts=1):
        assert os.getpid() == logical_pid(3, 1) > LOGICAL_PID_FIRST and os.getppid() == LOGICAL_PID_FIRST
        os.kill(os.getpid(), 0)
        child = os.fork()
        if child == 0:
            os._exit(0 if (os.getpid() != logical_pid(3, 1) and os.getppid() == logical_pid(3, 1)) else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    assert os.getpid() == real


def torchrun_json(script: Path, hash_seed: str, *options: str) -> dict:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "timetravel", "torchrun", "--nproc-per-node", "2", "--json"),
            *options,
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_script_that_iterates_a_set_of_strings_gives_one_hash_chain_under_any_caller_hash_seed(
    tmp_path: Path,
) -> None:
    leak = SCRIPTS / "set_order_leak.py"
    reports = [
        torchrun_json(leak, seed, "--record", str(tmp_path / f"{seed}.ttr")) for seed in CALLER_HASH_SEEDS
    ]
    assert reports[0]["outcome"] == "pass", reports[0]["failure"]
    assert [(report["hash_chain"], report["state_hash"]) for report in reports] == [
        (reports[0]["hash_chain"], reports[0]["state_hash"])
    ] * len(reports)
    with RecordingReader.open(tmp_path / "1.ttr") as reader:
        assert reader.header["config"]["python_hash_seed"] == 0  # the header says how sets iterated


def test_the_setting_python_hash_seed_is_the_ranks_hash_secret() -> None:
    """Set order under PYTHONHASHSEED 0 and 1 differs for set_order_leak.py's four names: so do the runs."""
    leak = SCRIPTS / "set_order_leak.py"
    scenario = get_scenario("torch")
    states = []
    for hash_seed in (0, 1):
        config = scenario.resolve_config(
            [f"script={leak}", "nproc=2", "rank_output=quiet", f"python_hash_seed={hash_seed}"]
        )
        report = run_report(scenario, config, 0, launch=launch_naming([str(leak)]))[0]
        assert report["outcome"] == "pass", report["failure"]
        states.append(report["state_hash"])
    assert states[0] != states[1]
