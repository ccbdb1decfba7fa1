"""``timetravel bench explore``: what branching, fanning out and comparing futures cost.

On the dp_training demo (``preset=demo`` at its own seed; gossip with 256 nodes when dp_training
is not installed), recorded at the default snapshot interval, forking at 80% of the recorded
time (950 ms on the demo, 5% before its failure):

* ``record_s``: recording the run (for scale).
* ``branch_s``, ``branch_events_per_s``, ``branch_bytes``: one stored branch with a new branch key
  (restore at the fork, run the future while recording it into the same file), best of 3 on
  fresh copies of the recording; bytes it appended (blobs shared with the prefix are not).
* ``divergence_s``: first divergence of main and that branch (bisect snapshots, then step).
* ``compare_s``: compare (outcomes, metric curves, divergence).
* ``fanout_future_s``: wall time per future of ``fanout`` (not stored), over FANOUT_SAMPLES.
* ``likelihood_s``: ``likelihood`` with LIKELIHOOD_SAMPLES futures at LIKELIHOOD_POINTS snapshots
  spread over the run.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from timetravel.bench.timing import best_of
from timetravel.explore.branching import branch
from timetravel.explore.compare import compare
from timetravel.explore.divergence import first_divergence
from timetravel.explore.fanout import fanout, likelihood
from timetravel.explore.session import Session
from timetravel.recording import record_run
from timetravel.scenarios import UnknownScenarioError, get_scenario
from timetravel.sim.scenario import Scenario

FORK_FRACTION = 0.8
FANOUT_SAMPLES = 4
LIKELIHOOD_SAMPLES = 2
LIKELIHOOD_POINTS = 8
GOSSIP_SETTINGS = {"nodes": 256, "rumors": 60}


def _workload(quick: bool) -> tuple[str, Scenario, dict[str, Any], int]:
    try:
        scenario = get_scenario("dp_training")
    except UnknownScenarioError:
        scenario = get_scenario("gossip")
        settings = {"nodes": 64, "rumors": 20} if quick else GOSSIP_SETTINGS
        return f"gossip {settings['nodes']} nodes", scenario, scenario.resolve_config(settings), 7
    config = scenario.resolve_config(["preset=demo", *(["steps=20"] if quick else [])])
    seed = int(getattr(scenario, "preset_seeds", {}).get("demo", 0))
    return f"dp_training demo seed {seed}", scenario, config, seed


def run_bench(quick: bool = False) -> dict[str, Any]:
    """Measure and return the explore figures (``quick``: a small workload, for smoke tests)."""
    name, scenario, config, seed = _workload(quick)
    notes = ["measured on a shared 2-core machine: wall-clock figures are noisy", f"workload: {name}"]
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "source.ttr"
        started = time.perf_counter()
        report, _world = record_run(scenario, config, seed, source)
        record_s = time.perf_counter() - started
        fork_ns = int(report["t_end_ns"] * FORK_FRACTION)
        copies = iter(range(100))

        def one_branch() -> tuple[Path, Any, int]:
            path = Path(folder) / f"copy{next(copies)}.ttr"
            shutil.copy(source, path)
            size = path.stat().st_size
            with Session.open(path, scenario=scenario) as session:
                result = branch(session, fork_ns, {"branch_key": 1})
            return path, result, path.stat().st_size - size

        repeats = 1 if quick else 3
        branch_s, (path, branched, added) = best_of(one_branch, repeats)
        with Session.open(path, scenario=scenario) as session:
            fork_events = session.reader.catalog.branches["b1"]["at_events"]
            divergence_s, _ = best_of(lambda: first_divergence(session, "main", "b1"), repeats)
            compare_s, _ = best_of(lambda: compare(session, "main", "b1"), repeats)
            fanout_s, _ = best_of(lambda: fanout(session, fork_ns, FANOUT_SAMPLES), 1)
            likelihood_s, walked = best_of(
                lambda: likelihood(session, LIKELIHOOD_SAMPLES, points_max=LIKELIHOOD_POINTS), 1
            )
    return {
        "bench": "explore",
        "figures": {
            "events": report["events"],
            "record_s": round(record_s, 3),
            "branch_s": round(branch_s, 3),
            "branch_events_per_s": round((branched.events - fork_events) / branch_s),
            "branch_bytes": added,
            "divergence_s": round(divergence_s, 3),
            "compare_s": round(compare_s, 3),
            "fanout_future_s": round(fanout_s / FANOUT_SAMPLES, 3),
            "likelihood_s": round(likelihood_s, 3),
            "likelihood_points": len(walked.points),
            "notes": notes,
        },
    }
