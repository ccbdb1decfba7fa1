"""A per-rank memory limit (issue 32, item 10): a script that would exhaust the host fails `oom`,
naming the rank, instead of swapping the machine to a halt.

Each rank runs under RLIMIT_DATA = the setting rank_memory_max (default `auto`: 3/4 of the machine's
memory divided among the ranks, torch/world/memory.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.sim.scenario import ConfigError
from timetravel.torch.world.memory import RANK_MEMORY_MIN_BYTES, machine_memory_bytes, rank_memory_bytes
from timetravel.torch.world.specs import launch_naming

HOG = Path(__file__).resolve().parent / "torch_scripts" / "memory_hog.py"


def run_hog(*settings: str) -> dict:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={HOG}", "nproc=2", "rank_output=quiet", *settings])
    return run_report(scenario, config, 0, launch=launch_naming([str(HOG)]))[0]


@pytest.mark.parametrize("settings", [("rank_memory_max=2GiB",), ()], ids=["2GiB", "auto"])
def test_a_rank_past_its_memory_limit_fails_oom_naming_the_rank(settings: tuple[str, ...]) -> None:
    """64 GiB asked for: more than the auto share of this machine (and than 2 GiB)."""
    assert machine_memory_bytes() * 0.75 / 2 < 64 << 30, "a machine this large needs a larger hog"
    report = run_hog(*settings)
    failure = report["failure"]
    assert failure is not None, "the rank allocated 64 GiB: no limit"
    assert (failure["kind"], failure["node"]) == ("oom", "r1")
    assert failure["message"].startswith("r1 ran out of memory (its limit: the setting rank_memory_max)")
    assert "memory_hog.py" in failure["message"]  # where the script allocated


def test_under_the_limit_the_script_runs() -> None:
    report = run_hog("rank_memory_max=off", "args=2")
    assert report["outcome"] == "pass", report["failure"]


def test_the_setting_reads_auto_off_and_sizes_and_refuses_anything_else() -> None:
    assert rank_memory_bytes("off", 2) is None
    assert rank_memory_bytes("8GiB", 2) == rank_memory_bytes("8G", 4) == 8 << 30
    assert rank_memory_bytes("512m", 1) == 512 << 20 and rank_memory_bytes("1073741824", 1) == 1 << 30
    assert rank_memory_bytes("auto", 2) == max(int(machine_memory_bytes() * 0.75) // 2, RANK_MEMORY_MIN_BYTES)
    assert rank_memory_bytes("auto", 1024) == RANK_MEMORY_MIN_BYTES
    for wrong in ("lots", "-1G", "0", "8 parsecs"):
        with pytest.raises(ConfigError, match="rank_memory_max"):
            rank_memory_bytes(wrong, 2)
