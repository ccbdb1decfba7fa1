"""The whole App at work, for ``timetravel bench tui``: is any frame held up while it seeks?

The widget figures (``bench.py``) time one drawing each; a user waits on more than that: a seek
re-executes events on a worker, its view is shown on the UI thread, the kernel spans and the
event index follow on workers of their own, and all of them share one interpreter (the GIL). So
this runs the real App headless on a recording of gossip (1,024 nodes), scrubs to ``SEEKS`` times
spread over the run, and measures

* ``app_loop_lag_max_ms``: the most the UI thread's event loop was late (a task that asks to
  wake every 5 ms records how late it woke): a frame cannot be drawn while the loop is held, so
  this is the longest frame anyone could have waited for;
* ``app_show_view_max_ms``: the longest the UI thread spent putting one view on screen;
* ``app_seek_p50_ms`` and ``app_seek_max_ms``: from the scrub to its view on screen (not a
  frame: the screen stays live meanwhile, this is how long the answer takes).

The full garbage collection the App runs once the user is idle (``timetravel.tui.collector``)
is not part of these runs: a scrub follows the last one at once, as a user's keys do.

Wall-clock time is read here, in a benchmark, never in the simulation path.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from timetravel.explore.commands import open_context
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim.timefmt import format_time
from timetravel.tui.app import TimeTravelApp
from timetravel.tui.engine import Engine
from timetravel.tui.model import CursorView

SEEKS = 20
APP_RUNS = 3
APP_RUNS_QUICK = 1
PROBE_INTERVAL_S = 0.005
SETTLE_ROUNDS_MAX = 10_000
SCREEN = (160, 48)
SNAPSHOT_EVERY_EVENTS = 8192


def _record(directory: Path, quick: bool) -> Path:
    scenario = get_scenario("gossip")
    nodes, rumors = (256, 10) if quick else (1024, 50)
    path = directory / "gossip.ttr"
    config = scenario.resolve_config({"nodes": nodes, "rumors": rumors})
    record_run(scenario, config, 7, path, snapshot_every_events=SNAPSHOT_EVERY_EVENTS)
    return path


async def _probe(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(PROBE_INTERVAL_S)
        lags.append(time.perf_counter() - start - PROBE_INTERVAL_S)


async def settle(app: TimeTravelApp, pilot: Any) -> None:
    """Wait until the App's workers are done and it is idle (at most SETTLE_ROUNDS_MAX pauses)."""
    for _ in range(SETTLE_ROUNDS_MAX):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if app.is_idle:
            return
    raise RuntimeError("the App did not settle")


async def _measure(path: Path) -> dict[str, float]:
    with open_context(path) as context:
        app = TimeTravelApp(Engine(context), path=str(path))
        shows: list[float] = []
        show = app._show_view

        def timed_show(view: CursorView) -> None:
            start = time.perf_counter()
            show(view)
            shows.append(time.perf_counter() - start)

        app._show_view = timed_show  # type: ignore[method-assign]
        seeks: list[float] = []
        lags: list[float] = []
        async with app.run_test(size=SCREEN) as pilot:
            await settle(app, pilot)
            assert app.view is not None
            end_ns = app.view.timeline.t_end_ns
            stop = asyncio.Event()
            probe = asyncio.create_task(_probe(stop, lags))
            for index in range(SEEKS):
                t_ns = (index * 7 % SEEKS + 1) * end_ns // (SEEKS + 1)  # spread over the run, out of order
                start = time.perf_counter()
                app.run_command(f"goto {format_time(t_ns, app.engine.unit)}", kind="seek")
                await settle(app, pilot)
                seeks.append(time.perf_counter() - start)
                assert app.view.cursor_ns == t_ns
            stop.set()
            await probe
    return {
        "app_loop_lag_max_ms": round(max(lags) * 1000, 2),
        "app_show_view_max_ms": round(max(shows) * 1000, 2),
        "app_seek_p50_ms": round(statistics.median(seeks) * 1000, 1),
        "app_seek_max_ms": round(max(seeks) * 1000, 1),
    }


def measure_app(quick: bool = False) -> dict[str, Any]:
    """Record gossip (256 nodes when ``quick``, else 1,024), open it in the App, scrub it.

    Like every figure of the suite, the App's are the best of ``APP_RUNS`` runs (a run's figure
    is its worst frame); ``app_loop_lag_worst_run_ms`` is the worst run's, so a noisy neighbour
    shows rather than hides.
    """
    with tempfile.TemporaryDirectory() as directory:
        path = _record(Path(directory), quick)
        with open_context(path) as context:
            events = context.session.end.events
        runs = [asyncio.run(_measure(path)) for _ in range(APP_RUNS_QUICK if quick else APP_RUNS)]
    best = min(runs, key=lambda run: run["app_loop_lag_max_ms"])
    figures: dict[str, Any] = {"app_recording_events": events, **best}
    figures["app_loop_lag_worst_run_ms"] = max(run["app_loop_lag_max_ms"] for run in runs)
    return figures
