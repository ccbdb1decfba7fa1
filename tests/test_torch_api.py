"""timetravel.torch.simulate and the pytest plugin: a function as N simulated ranks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch_functions

import timetravel.torch

ROOT = Path(__file__).resolve().parent.parent


def test_simulate_returns_every_rank_s_value() -> None:
    run = timetravel.torch.simulate(torch_functions.sum_of_ranks, nproc=4, seed=2)
    assert run.passed, run.failure
    assert run.returns == [6.0, 6.0, 6.0, 6.0]


def test_simulate_reports_the_failure() -> None:
    run = timetravel.torch.simulate(torch_functions.only_rank_zero_reduces, nproc=2)
    assert run.outcome == "fail"
    assert run.failure is not None and run.failure["kind"] == "hang"


def test_a_local_function_is_refused_with_a_clear_message() -> None:
    def local() -> None:
        pass

    with pytest.raises(ValueError, match="define it at module level"):
        timetravel.torch.simulate(local)


def test_the_pytest_plugin_runs_marked_tests_on_every_seed(tmp_path: Path) -> None:
    test_file = tmp_path / "test_ranks.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import pytest
            import torch
            import torch.distributed as dist

            @pytest.mark.timetravel(nproc=2)
            def test_hangs_on_rank_one():
                dist.init_process_group("gloo")
                if dist.get_rank() == 0:
                    dist.all_reduce(torch.ones(1))
            """
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(test_file),
            "--timetravel-seeds",
            "0:2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stdout[-2000:]
    assert "seed 0: hang on r1" in result.stdout
    assert "reproduce: pytest" in result.stdout and "--timetravel-seeds 0:1" in result.stdout
