"""The SVG screenshots in docs/tui/: the real App on real recordings, exported with Textual.

    PYTHONPATH=. python -m tests.tui.screenshots docs/tui

Each screenshot records a recording (in a temporary directory), opens it in the App headless at a
fixed size, runs the command lines a user would type, waits until the engine and the event index
are done, and writes ``app.export_screenshot()``. docs/tui.md shows them; re-run this after a
change to the screens and look at them before committing.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.fabric_example import SCENARIO as FABRIC_EXAMPLE
from tests.tui.conftest import record
from tests.tui.test_flow import root_cause
from timetravel.explore.commands import open_context
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training.params import DEMO_SEED
from timetravel.sim.scenario import Scenario
from timetravel.tui.app import TimeTravelApp
from timetravel.tui.bench_app import settle
from timetravel.tui.engine import Engine


def shoot(
    path: Path,
    out: Path,
    *,
    size: tuple[int, int],
    lines: Sequence[str] = (),
    keys: Sequence[Sequence[str]] = (),
    scenario: Scenario | None = None,
) -> None:
    """Open ``path``, run ``lines`` then press each group of ``keys``, letting the App settle after each
    (a key pressed before the screen it is meant for exists goes to the one before), and write the
    screen to ``out``."""

    async def main() -> None:
        with open_context(path, scenario=scenario) as context:
            app = TimeTravelApp(Engine(context), path=path.name)
            async with app.run_test(size=size) as pilot:
                await settle(app, pilot)
                for line in lines:
                    app.run_command(line)
                    await settle(app, pilot)
                for group in keys:
                    await pilot.press(*group)
                    await settle(app, pilot)
                out.write_text(app.export_screenshot(title=f"timetravel tui {path.name}"), encoding="utf-8")

    asyncio.run(main())


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        demo = Path(scratch) / "dp_training-demo.ttr"
        scenario = get_scenario("dp_training")
        record_run(scenario, scenario.resolve_config({"preset": "demo"}), DEMO_SEED, demo)
        race = Path(scratch) / "fabric_example-3.ttr"
        record(race, FABRIC_EXAMPLE, {"bug": "missing_wait"}, 3)
        _failure, cause = root_cause(demo)
        story = ["goto 1000", "goto 950", f"branch --drop-fault {cause['id']}"]
        compare_keys = [["4", "down", "c"]]
        shots: list[tuple[str, Path, dict[str, Any]]] = [
            ("main-80x24.svg", demo, {"size": (80, 24), "lines": ["goto 1000", "goto 950"]}),
            ("main-160x48.svg", demo, {"size": (160, 48), "lines": story}),
            ("compare-120x36.svg", demo, {"size": (120, 36), "lines": story, "keys": compare_keys}),
            (
                "diff-120x36.svg",
                demo,
                {"size": (120, 36), "lines": story, "keys": [*compare_keys, ["enter"]]},
            ),
            (
                "streams-race-120x36.svg",
                race,
                {"size": (120, 36), "keys": [["end", "3"]], "scenario": FABRIC_EXAMPLE},
            ),
            ("keymap-100x30.svg", demo, {"size": (100, 30), "keys": [["question_mark"]]}),
        ]
        for name, path, options in shots:
            fresh = Path(scratch) / name / path.name  # a fresh copy for each: a branch appends to the file
            fresh.parent.mkdir()
            shutil.copyfile(path, fresh)
            shoot(fresh, directory / name, **options)
            written.append(directory / name)
    return written


if __name__ == "__main__":
    for path in write_all(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/tui")):
        print(f"wrote {path}")
