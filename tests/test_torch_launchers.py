"""Other launchers than ``torchrun SCRIPT``: ``timetravel torchrun -m MODULE`` (as ``torchrun -m``) and
``timetravel python SCRIPT`` for scripts that spawn their own ranks with torch.multiprocessing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch  # the dev install has it: CI must fail, not skip, without it
from torch_launch import ROOT

SCRIPTS = ROOT / "tests" / "torch_scripts"


def make_package(folder: Path) -> None:
    """``trainer/train.py`` imports its sibling ``trainer.settings``, as packaged training code does."""
    package = folder / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text("SCALE = 3.0\n")
    (package / "train.py").write_text(
        "import sys\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "from trainer.settings import SCALE\n"
        "assert __name__ == '__main__', __name__\n"
        "assert sys.argv[0].endswith('trainer/train.py') and sys.argv[1:] == ['--steps', '2'], sys.argv\n"
        "dist.init_process_group('gloo')\n"
        "total = torch.full((1,), SCALE)\n"
        "dist.all_reduce(total)\n"
        "print('total', total.item())\n"
    )


def test_dash_m_runs_a_module_as_python_dash_m_would(tmp_path: Path, run_cli: Callable) -> None:
    make_package(tmp_path)
    result = run_cli(
        "torchrun",
        "--nproc-per-node",
        "2",
        "--json",
        "-m",
        "trainer.train",
        "--steps",
        "2",
        cwd=tmp_path,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "pass"
    assert report["summary"]["collectives"] == 1
    assert "[r0] total 6.0" in result.stderr and "[r1] total 6.0" in result.stderr


def test_dash_m_of_a_module_nowhere_on_the_path_is_one_line(tmp_path: Path, run_cli: Callable) -> None:
    result = run_cli("torchrun", "--nproc-per-node", "2", "-m", "no_such_package.train", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        "timetravel: error: module 'no_such_package.train' was not found as a .py file on the Python "
        "path (python -m no_such_package.train)\n"
    )


def test_python_makes_each_spawned_process_a_simulated_rank(run_cli: Callable) -> None:
    result = run_cli("python", "--nproc-per-node", "2", "--json", str(SCRIPTS / "spawn_ddp.py"), "3")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["optimizer_steps"] == 3  # the job's steps (each of the 2 spawned ranks made 3)
    assert report["summary"]["collectives"] > 0
    assert "[r1] rank 1 step 2 loss" in result.stderr


def test_python_on_a_cpu_host_spawns_with_gloo_as_real_python_does(run_cli: Callable) -> None:
    result = run_cli(
        "python", "--nproc-per-node", "2", "--set", "cuda=off", "--json", str(SCRIPTS / "spawn_ddp.py"), "2"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["summary"]["optimizer_steps"] == 2


def test_python_says_when_the_script_spawns_another_number_of_processes(run_cli: Callable) -> None:
    result = run_cli(
        "python", "--nproc-per-node", "3", "--set", "cuda=off", "--json", str(SCRIPTS / "spawn_ddp.py"), "1"
    )
    assert result.returncode == 1
    failure = json.loads(result.stdout)["failure"]
    assert "the script spawns 2 processes, and timetravel python runs 3 ranks per host" in failure["message"]
    assert "--nproc-per-node 2" in failure["message"]
    assert torch.cuda.device_count() == 0  # (this host: the script spawns 2 without CUDA)
