"""The conformance suite: code written for real torch.distributed runs unmodified under the simulator,
and gives real torchrun's numbers.

* Accelerate's own distributed test scripts, from its wheel (accelerate is pinned in the dev extra),
  under ``timetravel torchrun --nproc-per-node 2`` with the simulator's defaults (two CUDA devices
  on CPU): they must pass, as they pass under real torchrun;
* the project's idiom scripts (tests/torch_scripts/idiom_*.py, one per idiom of public training code):
  each must pass under the simulator, with collectives and optimizer steps (a script whose group
  bypassed the simulator, or that took a no-GPU exit, passes with none), and give real torchrun +
  gloo's losses and state under ``--against-real`` (world/against_real.py): identical, or within
  summation order. Two comparisons run in the fast selection (FSDP2 with meta init and DCP, the 0-dim
  parameters); every other comparison is ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import accelerate
import pytest
import torch  # the dev install has it: CI must fail, not skip, without it
from torch_launch import ROOT, TEST_SCRIPTS

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.torch.world.against_real import against_real
from timetravel.torch.world.specs import launch_naming

SCRIPTS = ROOT / "tests" / "torch_scripts"
ACCELERATE_SCRIPTS = Path(accelerate.__file__).parent / "test_utils" / "scripts"
IDIOMS = (
    "idiom_fsdp2_meta.py",
    "idiom_tensor_parallel.py",
    "idiom_pipelining.py",
    "idiom_ddp_compile.py",
    "idiom_accelerator.py",
    "idiom_scalar_param.py",
    "idiom_amp.py",
    "idiom_dataloader_workers.py",
)
INIT_FORMS = (
    "none",
    "positional",
    "keyword",
    "per-device",
    "timeout",
    "rank-world",
    "env",
    "tcp",
    "file",
    "store",
)
COMPARED_FAST = ("idiom_fsdp2_meta.py", "idiom_scalar_param.py")


def simulate(script: Path, *settings: str, launch=TEST_SCRIPTS) -> dict:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", "nproc=2", "rank_output=quiet", *settings])
    return run_report(scenario, config, 0, launch=launch)[0]


def assert_trained(report: dict) -> None:
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["collectives"] > 0, "no collective reached the simulator"
    assert report["summary"]["optimizer_steps"] > 0, "no optimizer step"


def assert_real_numbers(script: Path, *args: str) -> dict:
    report = against_real(str(script), list(args), nproc=2)
    verdicts = {
        rank["rank"]: (rank["verdict"], rank["state"]["first_difference"]) for rank in report["ranks"]
    }
    assert report["verdict"] in ("identical", "summation_order"), (
        report["simulator"],
        report["real"],
        verdicts,
    )
    assert all(rank["state"]["steps"]["real"] > 0 for rank in report["ranks"]), "nothing was compared"
    return report


@pytest.mark.parametrize("name", ["test_script", "test_ops", "test_sync"])
def test_accelerates_distributed_test_scripts_pass_unmodified(name: str) -> None:
    script = ACCELERATE_SCRIPTS / f"{name}.py"
    report = simulate(script, "stuck_timeout=60", launch=launch_naming([str(script)]))
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["collectives"] > 0


@pytest.mark.parametrize("script", IDIOMS)
def test_idiom_runs_under_the_simulator(script: str) -> None:
    assert_trained(simulate(SCRIPTS / script))


@pytest.mark.parametrize("script", COMPARED_FAST)
def test_idiom_gives_real_torchruns_numbers(script: str) -> None:
    assert_real_numbers(SCRIPTS / script)


@pytest.mark.slow
@pytest.mark.parametrize("script", [script for script in IDIOMS if script not in COMPARED_FAST])
def test_idiom_gives_real_torchruns_numbers_slow(script: str) -> None:
    assert_real_numbers(SCRIPTS / script)


@pytest.mark.slow
@pytest.mark.parametrize("form", INIT_FORMS)
def test_each_init_form_gives_real_torchruns_numbers(form: str) -> None:
    report = assert_real_numbers(SCRIPTS / "idiom_init_form.py", form)
    assert all(rank["printed_losses"]["count"]["real"] == 3 for rank in report["ranks"])


def test_the_init_forms_reach_the_simulator() -> None:
    for form in ("keyword", "store"):
        assert_trained(simulate(SCRIPTS / "idiom_init_form.py", f"args={form}"))
    assert torch.cuda.device_count() == 0  # the forms above are the ones a CPU host's real torch takes
