"""The torch scenario's settings (``--set key=value``, and ``timetravel torchrun``'s options).

One table, read by the scenario (the config a World starts from), by the rank specs (what a rank
process is told) and by the command line's help.
"""

from __future__ import annotations

from timetravel.sim.scenario import Param
from timetravel.torch.protocol.limits import (
    COMPUTE_FLOPS_PER_S_DEFAULT,
    STATE_BYTES_MAX_DEFAULT,
    STUCK_TIMEOUT_S_DEFAULT,
)
from timetravel.torch.world.timing import FABRIC_TORCH_PARAMS

PYTHON_HASH_SEED_DEFAULT = 0
"""Every rank's ``PYTHONHASHSEED`` unless the run sets another: 0, as if hash randomization were off."""
PYTHON_HASH_SEED_MAX = 4_294_967_295
"""The largest ``PYTHONHASHSEED`` Python accepts."""

PARAMS: tuple[Param, ...] = (
    Param("script", "str", "", "the training script to run as every rank (you name it: it is code)"),
    Param(
        "module",
        "str",
        "",
        "run the script as `python -m MODULE` (torchrun -m): `script` is then the module's file",
    ),
    Param("function", "str", "", "instead of a script: module:function to run as every rank (Python API)"),
    Param("args", "str", "", "the script's own arguments, as one shell-quoted string"),
    Param(
        "workdir",
        "str",
        "",
        "the ranks' private working directory starts as a copy of this directory ('' = empty)",
    ),
    Param(
        "nproc",
        "int",
        2,
        "ranks per host (torchrun --nproc-per-node); minimize lowers it, keeping the ranks a failure involves",
        minimum=1,
        shrinkable=True,
    ),
    Param("nnodes", "int", 1, "hosts (torchrun --nnodes); ranks = nproc x nnodes", minimum=1),
    Param(
        "env_style",
        "str",
        "torchrun",
        "environment given to ranks: torchrun, slurm (adds SLURM_*) or python (as `python SCRIPT` has "
        "it: no torchrun variables; torch.multiprocessing.spawn runs its function as the rank)",
        choices=("torchrun", "slurm", "python"),
    ),
    Param(
        "hang_timeout",
        "time",
        600_000_000_000,
        "a rank waiting this long in a collective is a hang (logical time)",
    ),
    Param(
        "compute_interval", "time", 100_000, "compute charged between two calls to the World (logical time)"
    ),
    Param(
        "compute_model",
        "str",
        "fixed",
        "compute between calls: fixed (compute_interval only) or flops (plus the products' flops at "
        "compute_flops_per_s; docs/torch.md)",
        choices=("fixed", "flops"),
    ),
    Param(
        "compute_flops_per_s",
        "int",
        COMPUTE_FLOPS_PER_S_DEFAULT,
        "the simulated GPU's sustained rate under compute_model=flops",
        minimum=1,
    ),
    Param(
        "compute_jitter",
        "time",
        10_000,
        "bound of the seeded jitter added to each interval (choice torch.compute)",
    ),
    Param(
        "reduce_order",
        "str",
        "canonical",
        "summation order: canonical (rank order) or arrival (the order contributions reach the reducer)",
        choices=("canonical", "arrival"),
        branchable=True,
    ),
    Param(
        "compile",
        "str",
        "eager",
        "torch.compile inside ranks: eager (any backend runs eagerly: no compiler in the simulator) or inductor",
        choices=("eager", "inductor"),
    ),
    Param(
        "cuda",
        "str",
        "on",
        "CUDA inside ranks: on (torch.cuda serves N devices on CPU tensors) or off (no device, as torch "
        "sees a CPU-only host: the code path real torchrun takes here; what --against-real uses)",
        choices=("on", "off"),
    ),
    Param("detect_nan", "bool", True, "fail at the first collective a rank feeds a NaN or Inf"),
    Param(
        "detect_divergence",
        "bool",
        True,
        "fail when replicas receive different results from a collective, or their parameters differ after a step",
    ),
    Param(
        "detect_resume_mismatch",
        "bool",
        True,
        "after a crash fault and a restart, fail when the run differs from the same seed's run without "
        "the crash (costs one more run of the script, only then)",
    ),
    Param(
        "detect_silent_corruption",
        "bool",
        True,
        "when corrupt faults acted in a run that otherwise passed, fail when its final parameters differ "
        "from the same seed's run in which those faults wrote nothing (costs one more run of the script, "
        "only then)",
    ),
    Param(
        "detect_duplicate_batches",
        "str",
        "warn",
        "two ranks given the same sampler indices in one optimizer step, or a sampler whose order repeats "
        "every epoch: warn (in the run's summary), fail, or off",
        choices=("warn", "fail", "off"),
    ),
    Param(
        "state_every_steps",
        "int",
        1,
        "store params, optimizer state and local grads every this many optimizer steps; 0 = off "
        "(sweeps may pass 0 to go faster)",
        minimum=0,
    ),
    Param(
        "state_bytes_max",
        "int",
        STATE_BYTES_MAX_DEFAULT,
        "per rank and step: a state step of more bytes keeps only its digests (a recording says so in a note)",
        minimum=0,
    ),
    Param(
        "stuck_timeout",
        "float",
        STUCK_TIMEOUT_S_DEFAULT,
        "wall seconds a rank may run without calling the World",
        minimum=0.1,
    ),
    Param(
        "max_restarts",
        "int",
        0,
        "restart every rank after a crash or exception, this many times (torchelastic --max-restarts)",
        minimum=0,
    ),
    Param(
        "restart_delay", "time", 1_000_000, "logical time between a failure and the restarted ranks' start"
    ),
    Param(
        "faults",
        "json",
        [],
        "fault records at the collective layer (docs/torch.md, Faults), inline or @file.json; or swarm: "
        "each seed draws 1 to faults_max bit flips (the corruptor swarm)",
    ),
    Param("faults_max", "int", 2, "swarm: at most this many bit flips per seed", minimum=0),
    Param("faults_from", "time", 0, "swarm: the earliest time a flip starts"),
    Param(
        "faults_window",
        "time",
        10_000_000,
        "swarm: flips start before this time (set it to about your run's simulated length)",
        minimum=1,
    ),
    Param(
        "rank_memory_max",
        "str",
        "auto",
        "the most memory one rank may allocate (its data segment): auto (3/4 of the machine divided among "
        "the ranks), off, or a size (8GiB, 512M); past it the run fails oom naming the rank",
    ),
    Param(
        "python_hash_seed",
        "int",
        PYTHON_HASH_SEED_DEFAULT,
        "every rank's PYTHONHASHSEED (the order of a set of strings), whatever the caller's: a fixed "
        "hash secret makes a run the same under any shell",
        minimum=0,
        maximum=PYTHON_HASH_SEED_MAX,
    ),
    Param(
        "rank_output",
        "str",
        "show",
        "ranks' stdout/stderr: show (prefixed [rN]) or quiet",
        choices=("show", "quiet"),
    ),
    *FABRIC_TORCH_PARAMS,
)

BRANCHABLE_KEYS = frozenset(param.name for param in PARAMS if param.branchable)
"""Settings a branch may change mid-run: the World applies them; a rank process never sees them."""
