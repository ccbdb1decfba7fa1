"""``timetravel bench torch`` at scale: how many ranks of the tiny DDP example fit in 16 GiB.

The example (docs/examples/torch/ddp_mlp.py) runs as N rank processes forked from one zygote that
has imported torch. Pages the zygote touched before the fork stay shared until a rank writes them,
so the memory of a job is not N times a torch process: it is what the processes' proportional set
sizes (PSS, /proc/PID/smaps_rollup: each shared page divided among the processes that map it) add
up to. This module measures that sum, at a collective boundary (every rank alive and blocked in an
all_reduce, the coordinator's World holding its state), for a few rank counts N, in this process
(the coordinator), the zygote and every rank:

    total_pss(N) = fixed + per_rank * N        (least squares over the measured N)
    torch_ranks_in_16gib = floor((16 GiB - fixed) / per_rank)

``per_rank`` is a rank's own memory (its heap, the pages of torch it wrote after the fork, the
model and the DDP buckets); ``fixed`` the zygote, the coordinator and the pages they share. The wall
seconds per training step are measured at the two largest N (warm zygote; a run of STEPS steps minus
one of STEPS_SHORT, over the difference, so the ranks' start is not a step)
and extrapolated the same way (``step_wall_s(N) = a + b * N``: the ranks take turns on the
machine's cores, so a step grows linearly with N) to ``torch_ranks_in_16gib``. Both figures are
**extrapolated** from the measured N, and say so in ``torch_scale_method``; the largest N is
measured, not guessed (``torch_scale_measured``).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DDP_SCRIPT = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"
BUDGET_BYTES = 16 * 1024**3
RANK_COUNTS = (4, 8, 16)
RANK_COUNTS_QUICK = (2, 4)
WALL_RANK_COUNTS = 2
"""The step wall time is measured at the largest this many counts only (a long and a short run
each); memory at every count (the short run): it keeps ``bench torch`` within its few minutes."""
STEPS = 4
SAMPLE_EVERY_EVENTS = 16
"""The World pauses this often for a memory sample (ranks are blocked in a collective then)."""
STEPS_SHORT = 2
"""Steps of the short run: a step's wall time is (long run - short run) / (STEPS - STEPS_SHORT), so
that starting the ranks (fork, process group, DDP's first broadcast) is not counted as a step."""


def memory_bytes(pid: int) -> tuple[int, int] | None:
    """(PSS, USS) of ``pid`` in bytes from /proc/PID/smaps_rollup (None when it is gone)."""
    fields = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                name, _, rest = line.partition(":")
                if name in ("Pss", "Private_Clean", "Private_Dirty"):
                    fields[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        return None
    if "Pss" not in fields:
        return None
    return fields["Pss"], fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)


def _job_pids(simulation: Any) -> list[int]:
    from timetravel.torch.world import driver
    from timetravel.torch.world.params import PYTHON_HASH_SEED_DEFAULT

    pids = [os.getpid()]
    zygote = driver.zygote(PYTHON_HASH_SEED_DEFAULT)
    pids.append(zygote.process.pid)
    for live in simulation.processes.drivers:
        pids.extend(live.pids.values())
    return pids


def measure_ranks(ranks: int, steps: int = STEPS) -> dict[str, Any]:
    """Run the example with ``ranks`` ranks; the largest PSS sum seen at a pause, and wall per step."""
    from timetravel.scenarios import get_scenario
    from timetravel.sim import Simulation
    from timetravel.sim.runner import build_world
    from timetravel.torch.world.specs import launch_naming

    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        [f"script={DDP_SCRIPT}", f"nproc={ranks}", f"args=--steps {steps}", "rank_output=quiet"]
    )
    peak = {"bytes": 0, "processes": 0, "rank_uss_bytes": 0}

    def sample(simulation: Any) -> None:
        sizes = [size for size in map(memory_bytes, _job_pids(simulation)) if size is not None]
        total = sum(pss for pss, _uss in sizes)
        if len(sizes) >= ranks + 2 and total > peak["bytes"]:
            peak["bytes"] = total
            peak["processes"] = len(sizes)
            peak["rank_uss_bytes"] = sum(uss for _pss, uss in sizes[2:]) // ranks

    launch = launch_naming([str(DDP_SCRIPT)])
    world = build_world(scenario, config, 0, launch)
    started = time.perf_counter()
    simulation = Simulation(scenario, world, launch=launch)
    result = simulation.run(pause_every_events=SAMPLE_EVERY_EVENTS, on_pause=sample)
    wall_s = time.perf_counter() - started
    if result.outcome != "pass":
        raise RuntimeError(f"torch scale run with {ranks} ranks did not pass: {result.failure}")
    if peak["processes"] == 0:
        raise RuntimeError(f"no memory sample with all {ranks} ranks alive (no /proc/PID/smaps_rollup?)")
    return {
        "ranks": ranks,
        "pss_bytes": peak["bytes"],
        "rank_uss_bytes": peak["rank_uss_bytes"],
        "wall_s": wall_s,
    }


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line ``y = a + b x`` through ``points``."""
    count = len(points)
    mean_x = sum(x for x, _ in points) / count
    mean_y = sum(y for _, y in points) / count
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return mean_y - slope * mean_x, slope


def run_scale_bench(quick: bool = False) -> dict[str, Any]:
    """The ``torch_ranks_in_16gib`` figures (``quick``: two small N, a smoke test)."""
    from timetravel.torch.world import driver
    from timetravel.torch.world.params import PYTHON_HASH_SEED_DEFAULT

    counts = RANK_COUNTS_QUICK if quick else RANK_COUNTS
    driver.zygote(PYTHON_HASH_SEED_DEFAULT)  # warm: the zygote's start is not a step
    steps = STEPS_SHORT + 1 if quick else STEPS
    runs = [measure_ranks(ranks, STEPS_SHORT) for ranks in counts]
    for run in runs[-WALL_RANK_COUNTS:]:
        long = measure_ranks(run["ranks"], steps)
        run["step_wall_s"] = max(long["wall_s"] - run["wall_s"], 0.0) / (steps - STEPS_SHORT)
        run["pss_bytes"] = max(run["pss_bytes"], long["pss_bytes"])
    fixed, per_rank = _fit([(run["ranks"], run["pss_bytes"]) for run in runs])
    fitted_ranks = math.floor((BUDGET_BYTES - fixed) / per_rank) if per_rank > 0 else None
    timed = [run for run in runs if "step_wall_s" in run]
    wall_fixed, wall_per_rank = _fit([(run["ranks"], run["step_wall_s"]) for run in timed])
    step_wall = wall_fixed + wall_per_rank * fitted_ranks if fitted_ranks is not None else None
    return {
        "torch_ranks_in_16gib": fitted_ranks,
        "torch_step_wall_s_at_16gib": round(step_wall, 2) if step_wall is not None else None,
        "torch_rank_pss_mib": round(per_rank / 2**20, 2),
        "torch_fixed_pss_mib": round(fixed / 2**20, 1),
        "torch_rank_uss_mib": round(runs[-1]["rank_uss_bytes"] / 2**20, 1),
        "torch_scale_measured": [
            {
                "ranks": run["ranks"],
                "pss_mib": round(run["pss_bytes"] / 2**20, 1),
                "step_wall_s": round(run["step_wall_s"], 3) if "step_wall_s" in run else None,
            }
            for run in runs
        ],
        "torch_scale_method": (
            f"PSS of coordinator + zygote + ranks at collective boundaries, max over the run, N in "
            f"{list(counts)}; ranks = (16 GiB - fixed) / per_rank and step wall = a + b*N, both "
            "least-squares fits extrapolated from the measured N"
        ),
    }
