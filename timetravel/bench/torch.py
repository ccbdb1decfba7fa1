"""``timetravel bench torch``: the user's script under the simulator against real torchrun with gloo.

Both sides run the same files on this machine in one bench run (the gloo side on loopback):

* ``run_ratio_vs_gloo`` — wall time of ``timetravel torchrun`` over ``torchrun --standalone`` (gloo) for
  the DDP MLP example (4 ranks, ``DDP_STEPS`` steps), each a whole command (process start and torch
  import included: what a user waits for). Target ≤ 1.0.
* ``collective_overhead_us`` — the simulator's wall cost of one small all_reduce on 4 ranks: a script
  doing ``LOOP_CALLS`` of them, minus the same script doing none, over ``LOOP_CALLS`` (in-process, the
  zygote warm); ``gloo_collective_us`` is the same figure for real gloo, timed by the script itself
  around its loop (subtracting whole torchrun commands left 0.0: their start-up noise swamped it).
* ``sim_per_wall`` — simulated seconds per wall second on the DDP run (warm zygote).

Best of ``REPEATS`` for each figure. The CPU build of torch, 1 intra-op thread on both sides.
Then the rewind figures of a recorded transformer run (seek, cold seek, record overhead, checkpoint
memory, branch, a rebuild of tensors' values): bench/torch_rewind.py; a bigger one (10M parameters,
8 ranks: how a recording grows): bench/torch_big.py; ``torch_ranks_in_16gib`` and the step time at
that size: bench/torch_scale.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from timetravel.bench.timing import best_of
from timetravel.bench.torch_big import run_big_bench
from timetravel.bench.torch_rewind import run_rewind_bench
from timetravel.bench.torch_scale import run_scale_bench

ROOT = Path(__file__).resolve().parents[2]
DDP_SCRIPT = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"
LOOP_SCRIPT = Path(__file__).resolve().parents[1] / "torch" / "scripts" / "allreduce_loop.py"
RANKS = 4
DDP_STEPS = 20
LOOP_CALLS = 200
REPEATS = 3


ATTEMPTS = 3
"""Real gloo on torch 2.13 (CPU) aborts at teardown about one run in six ("terminate called without an
active exception" after the script's last line): such a run is tried again, and only whole runs count."""


def _command_s(command: list[str]) -> float:
    return _command(command)[0]


def _command(command: list[str]) -> tuple[float, str]:
    """(wall seconds, stdout) of a command that succeeded, tried up to ATTEMPTS times."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    for _attempt in range(ATTEMPTS):
        started = time.perf_counter()
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=600, env=environment, cwd=ROOT
        )
        wall_s = time.perf_counter() - started
        if result.returncode == 0:
            return wall_s, result.stdout
    last_line = (result.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"{' '.join(command[2:4])} failed {ATTEMPTS} times: {last_line}")


def _gloo_loop_s(calls: int) -> float:
    """The loop's own seconds under real torchrun (the script's ``loop_wall_s`` line, rank 0)."""
    _wall_s, output = _command(_gloo(LOOP_SCRIPT, str(calls)))
    for line in output.splitlines():
        if line.startswith("loop_wall_s "):
            return float(line.split()[1])
    raise RuntimeError(f"{LOOP_SCRIPT.name} under torchrun printed no loop_wall_s line")


def _gloo(script: Path, *arguments: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={RANKS}",
        str(script),
        *arguments,
    ]


def _simulated(script: Path, *arguments: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "timetravel",
        "torchrun",
        f"--nproc-per-node={RANKS}",
        "--set",
        "rank_output=quiet",
        str(script),
        *arguments,
    ]


def _in_process(script: Path, *arguments: str) -> dict[str, Any]:
    from timetravel.scenarios import get_scenario
    from timetravel.sim.runner import run_report
    from timetravel.torch.world.specs import launch_naming

    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        [f"script={script}", f"nproc={RANKS}", f"args={' '.join(arguments)}", "rank_output=quiet"]
    )
    report, _world = run_report(scenario, config, 0, launch=launch_naming([str(script)]))
    if report["outcome"] != "pass":
        raise RuntimeError(f"bench run failed: {report['failure']}")
    return report


def run_bench(quick: bool = False) -> dict[str, Any]:
    repeats = 1 if quick else REPEATS
    steps = str(5 if quick else DDP_STEPS)
    calls = 40 if quick else LOOP_CALLS
    gloo_s = min(_command_s(_gloo(DDP_SCRIPT, "--steps", steps)) for _ in range(repeats))
    simulated_s = min(_command_s(_simulated(DDP_SCRIPT, "--steps", steps)) for _ in range(repeats))
    _in_process(LOOP_SCRIPT, "0")  # starts the zygote: what follows is warm
    loop_s, _ = best_of(lambda: _in_process(LOOP_SCRIPT, str(calls)), repeats)
    empty_s, _ = best_of(lambda: _in_process(LOOP_SCRIPT, "0"), repeats)
    gloo_loop_s = min(_gloo_loop_s(calls) for _ in range(repeats))
    ddp_s, report = best_of(lambda: _in_process(DDP_SCRIPT, "--steps", steps), repeats)
    scale = run_scale_bench(quick)  # first: the rewind figures leave this process holding a recording
    rewind = run_rewind_bench(quick)
    big = run_big_bench(quick)
    return {
        "bench": "torch",
        "figures": {
            "workload": f"docs/examples/torch/ddp_mlp.py, {RANKS} ranks, {steps} steps",
            "gloo_run_s": round(gloo_s, 3),
            "timetravel_run_s": round(simulated_s, 3),
            "run_ratio_vs_gloo": round(simulated_s / gloo_s, 3),
            "collective_overhead_us": round(max(loop_s - empty_s, 0.0) / calls * 1e6, 1),
            "gloo_collective_us": round(gloo_loop_s / calls * 1e6, 1),
            "sim_per_wall": round(report["t_end_ns"] / 1e9 / ddp_s, 6),
            "warm_run_s": round(ddp_s, 3),
            **rewind,
            **big,
            **scale,
        },
    }
