"""Real scripts' ways into torch, each as real torch 2.13 takes it (issue 30, docs/torch.md's
compatibility table). Every test here failed before the fix it checks."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import torch
from torch_recordings import ROOT, TIMETRAVEL

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.torch.rank.env.clock import RankClock
from timetravel.torch.rank.env.cuda import install_cuda
from timetravel.torch.world.specs import launch_naming

SCRIPTS = ROOT / "tests" / "torch_scripts"


def simulate(script: Path, nproc: int = 2, *settings: str) -> dict[str, Any]:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", f"nproc={nproc}", "rank_output=quiet", *settings])
    return run_report(scenario, config, 0, launch=launch_naming([str(script)]))[0]


def torchrun(
    script: Path, *arguments: str, nproc: int = 2, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TIMETRAVEL, "torchrun", "--nproc-per-node", str(nproc), *options, str(script), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


# -- whose error: the simulator's own is `internal`, never "rN raised" (item 9) ----------------------


def _raised(action: Any) -> BaseException:
    try:
        action()
    except Exception as error:
        return error
    raise AssertionError("nothing raised")


def test_an_error_inside_timetravel_s_code_is_internal_and_the_script_s_own_is_not() -> None:
    from timetravel.torch.rank.backend import wire_to_tensor
    from timetravel.torch.rank.errors import describe_error, error_kind

    ours = _raised(lambda: wire_to_tensor({}))  # a KeyError in the backend's own code
    assert error_kind(ours) == "internal"
    described = describe_error(ours)
    assert described["where"].startswith(str(ROOT / "timetravel" / "torch" / "rank" / "backend.py"))
    assert "Traceback" in described["traceback"]
    assert error_kind(_raised(lambda: {}["key"])) == "exception"  # the test's (the script's) own code


def test_torch_s_answer_through_a_timetravel_wrapper_is_the_script_s_error() -> None:
    from timetravel.torch.rank.errors import error_kind

    with install_cuda(0, 2, RankClock()):
        wrong_argument = _raised(lambda: torch.zeros("two", device="cuda"))  # through the wrapped factory
        moved_wrongly = _raised(lambda: torch.ones(2).to("cuda", dtype="float"))  # through Tensor.to
        bad_ordinal = _raised(lambda: torch.cuda.set_device(7))  # raised on purpose, as CUDA does
    assert [error_kind(error) for error in (wrong_argument, moved_wrongly, bad_ordinal)] == ["exception"] * 3


def test_a_simulator_bug_in_a_rank_is_an_internal_failure_with_its_traceback() -> None:
    failure = simulate(SCRIPTS / "simulator_bug.py")["failure"]
    assert failure["kind"] == "internal"
    assert "raised" not in failure["message"]
    assert "not of your script" in failure["message"] and "report it" in failure["message"]
    assert "timetravel/torch/rank/backend.py" in failure["message"]
    assert "in tensor_to_wire" in failure["traceback"]
    result = torchrun(SCRIPTS / "simulator_bug.py")
    assert result.returncode == 1, result.stderr
    text = result.stdout
    assert "outcome: FAIL  internal on r" in text
    assert "  | Traceback (most recent call last):" in text
