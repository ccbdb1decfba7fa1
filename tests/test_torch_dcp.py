"""``torch.distributed.checkpoint`` (dcp) save and load under the simulator: DDP and FSDP2 state dicts."""

from __future__ import annotations

from pathlib import Path

import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.torch.world.specs import launch_naming

SCRIPT = Path(__file__).resolve().parent / "torch_scripts" / "dcp_save_load.py"


def test_dcp_save_then_load_restores_ddp_and_fsdp2_state_exactly_in_the_working_directory() -> None:
    launch = launch_naming([str(SCRIPT)])
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={SCRIPT}", "nproc=2", "rank_output=quiet"])
    report, _world = run_report(scenario, config, 0, launch=launch)
    assert report["outcome"] == "pass", report["failure"]  # the script asserts every loaded tensor
    assert report["summary"]["warnings"] == []  # no write_outside_workdir: dcp wrote into the ranks' folder
    assert report["summary"]["optimizer_steps"] == 5  # 2 DDP steps, then 2 + 1 FSDP2 steps
    again, _world = run_report(scenario, config, 0, launch=launch)
    assert again["hash_chain"] == report["hash_chain"]  # the collectives dcp plans with are deterministic
