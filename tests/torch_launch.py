"""The scripts the torch tests name: what a test's Session or run may execute (sim/launch.py).

A torch recording re-executes only code the user named (``--script`` on the command line, a
``Launch`` in Python). The tests name, explicitly, the example and fixture scripts they record, the
way a user names their own script — never more: a test that checks a refusal passes no launch.
"""

from __future__ import annotations

from pathlib import Path

from timetravel.scenarios import get_scenario
from timetravel.sim.launch import Launch
from timetravel.sim.runner import run_report
from timetravel.sim.world import World
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
SCRIPT_FOLDERS = (ROOT / "docs" / "examples" / "torch", ROOT / "tests" / "torch_scripts")


def test_scripts() -> Launch:
    """Every example and fixture script may run (each test names what it records)."""
    return launch_naming(sorted(str(path) for folder in SCRIPT_FOLDERS for path in folder.glob("*.py")))


TEST_SCRIPTS = test_scripts()


def example_script(relative: str) -> Path:
    """An example or fixture script by its path from the repository's root."""
    path = ROOT / relative
    assert path.is_file() and path.parent in SCRIPT_FOLDERS, relative
    return path


def simulate_world(script: Path, nproc: int = 4, seed: int = 0, *settings: str) -> tuple[dict, World]:
    """Run SCRIPT on NPROC simulated ranks (their output quiet) with the torch scenario's SETTINGS, the
    script named as the one launch, as ``timetravel torchrun SCRIPT`` names it: the report and the world."""
    launch = launch_naming([str(script)])
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", f"nproc={nproc}", "rank_output=quiet", *settings])
    return run_report(scenario, config, seed, launch=launch)
