"""dp_training's config schema, presets and the values derived from a config.

The keys named in the issue (``ranks``, ``gpus_per_host``, ``steps``, ``params``, ``dtype``,
``allreduce``, ``reduce_order``, ``faults``, ``faults_max``, ``bug``, ``preset``, ``data_seed``,
``hang_timeout``, ``check_every``, ``grad_skip_norm``, ``oracle``, ``race_detector``) keep exactly
those names so that scripts can rely on them; the rest tune the model, the optimizer and the clock.
The hardware and fault keys (``gpus_per_host``, ``faults``, ``faults_max``, ``race_detector`` and
the link figures) are the fabric's own (``fabric_params``), so they mean the same in every scenario.
"""

from __future__ import annotations

from typing import Any

from timetravel.fabric import fabric_params
from timetravel.scenarios.dp_training.numerics import DTYPES
from timetravel.scenarios.dp_training.optimizer import OPTIMIZERS
from timetravel.sim import ConfigError, Param

ALLREDUCE_ALGORITHMS = ("ring", "tree", "naive")
FABRIC_LEVELS = ("auto", "message", "collective")
COLLECTIVE_LEVEL_RANKS_MIN = 256
"""``fabric_level=auto`` runs the collective level from this many ranks on, the message level below
(every test that looks at individual messages runs fewer ranks; docs/performance.md)."""
REDUCE_ORDERS = ("canonical", "arrival")
BUGS = ("none", "local_guard", "missing_wait", "stale_chunk", "restart_without_momentum")
MODEL_DTYPES = ("float32", "bfloat16")
REDUCE_DTYPES = ("float32", "bfloat16", "float64")
RANKS_MAX = 65_536
STEPS_MAX = 1_000_000
PARAMS_MAX = 16_777_216
FLOPS_PER_TFLOP_NS = 1_000.0
"""1 TFLOP/s is 1e12 FLOPs per second, that is 1e3 FLOPs per nanosecond."""

PARAMS: tuple[Param, ...] = (
    Param("preset", "str", "none", "a named bundle of settings, applied before --set values", choices=()),
    Param("ranks", "int", 16, "data-parallel ranks (GPUs); rank r is node rN", minimum=1, shrinkable=True),
    Param("steps", "int", 100, "training steps to run", minimum=1, shrinkable=True),
    Param("params", "int", 2048, "parameters of the toy MLP (the widest hidden layer that fits)", minimum=25),
    Param("dtype", "str", "float32", "dtype of weights, gradients and buckets", choices=MODEL_DTYPES),
    Param("reduce_dtype", "str", "float32", "dtype in which the all-reduce sums", choices=REDUCE_DTYPES),
    Param("allreduce", "str", "ring", "all-reduce algorithm", choices=ALLREDUCE_ALGORITHMS),
    Param(
        "reduce_order",
        "str",
        "canonical",
        "tree/naive: sum in fixed rank order (canonical) or as messages arrive (arrival)",
        choices=REDUCE_ORDERS,
        branchable=True,
    ),
    Param(
        "bug", "str", "none", "a planted bug to find (none: the correct code)", choices=BUGS, branchable=True
    ),
    Param(
        "data_seed", "int", 0, "seed of the initial weights and the dataset (apart from --seed)", minimum=0
    ),
    Param(
        "hang_timeout",
        "time",
        1_000_000_000,
        "fail as a hang when no rank completes a step for this long (a watchdog sees it)",
    ),
    Param(
        "checksums",
        "bool",
        True,
        "collective messages carry a checksum; a receiver drops one a bit flipped in flight (it is resent)",
    ),
    Param(
        "retransmit_timeout",
        "time",
        2_000_000,
        "a rank whose collective heard nothing this long asks its peers to resend (and checks this often)",
        minimum=1,
    ),
    Param("check_every", "int", 10, "compare replicas' weight checksums every this many steps", minimum=1),
    Param(
        "grad_skip_norm",
        "float",
        100.0,
        "step guard: skip the update on every rank when the all-reduced gradient norm is above (or non-finite)",
        minimum=0.0,
    ),
    Param("oracle", "bool", False, "check every step's weights against the fault-free run, bit for bit"),
    Param(
        "blowup_loss", "float", 1e4, "fail as blowup when a rank's own forward loss exceeds this", minimum=0.0
    ),
    Param(
        "loss_scale",
        "float",
        1.0,
        "mixed-precision loss scaling: the gradient buffer holds gradient x scale (a power of two changes no result)",
        minimum=1e-30,
    ),
    Param("optimizer", "str", "sgd", "sgd (with momentum) or adam", choices=OPTIMIZERS),
    Param("lr", "float", 0.05, "learning rate", minimum=0.0),
    Param("momentum", "float", 0.9, "SGD momentum", minimum=0.0),
    Param("batch", "int", 8, "samples per rank per step", minimum=1),
    Param(
        "batches_per_rank",
        "int",
        4,
        "batches in each rank's shard (step k uses batch (k-1) mod this)",
        minimum=1,
    ),
    Param(
        "model_flops",
        "float",
        9.0e11,
        "FLOPs of one rank's forward+backward in the modelled job",
        minimum=0.0,
    ),
    Param(
        "gpu_tflops",
        "float",
        100.0,
        "sustained TFLOP/s of one GPU (the compute kernel's speed)",
        minimum=1e-6,
    ),
    Param("compute_jitter", "time", 100_000, "extra compute time per step, drawn in [0, jitter]"),
    Param("optimizer_time", "time", 50_000, "duration of the optimizer kernel"),
    Param(
        "unpack_time",
        "time",
        20_000,
        "duration of the kernel that copies the all-reduced bucket into the gradient",
    ),
    Param(
        "checkpoint_every",
        "int",
        10,
        "rank 0 saves weights and optimizer state every this many steps (0: never)",
        minimum=0,
    ),
    Param("tree_chunk_bytes", "int", 262_144, "tree all-reduce: bytes per pipelined chunk", minimum=1),
    Param(
        "fabric_level",
        "str",
        "auto",
        f"message: every chunk is a message; collective: one completion event per rank per collective, "
        f"timed analytically; auto: collective from {COLLECTIVE_LEVEL_RANKS_MIN} ranks on",
        choices=FABRIC_LEVELS,
    ),
    Param(
        "collective_bytes",
        "int",
        0,
        "collective level: bytes the all-reduce moves in the modelled job (0: the toy bucket's own bytes)",
        minimum=0,
    ),
    Param(
        "bucket_bytes",
        "int",
        0,
        "collective level: the all-reduce runs as buckets of this many bytes back to back (0: one bucket)",
        minimum=0,
    ),
    *fabric_params(),
)

DEMO_SEED = 48
"""The demo preset's own seed (docs/scenarios/dp_training.md, "The demo"): ``demo.check_seed``
holds it to the demo's conditions, a test pins it, ``timetravel demo-seed`` finds another."""

PRESETS: dict[str, dict[str, Any]] = {
    "demo": {
        "ranks": 16,
        "steps": 120,
        "faults": "swarm",
        "faults_max": 24,
        "faults_from": 940_000_000,
        "faults_window": 1_000_000_000,
        "bug": "local_guard",
        "check_every": 10,
        "dtype": "bfloat16",
        "loss_scale": 32768.0,
    },
    "ring1024": {"ranks": 1024, "allreduce": "ring", "params": 2048, "steps": 3},
    "tree10000": {"ranks": 10_000, "allreduce": "tree", "params": 256, "steps": 3},
    "realistic": {
        # GPT-2 XL (1.558e9 parameters) trained with PyTorch DDP on 64 H100s (8 hosts x 8); the toy
        # MLP computes the numbers, these figures set the clock (docs/performance.md, "realistic").
        "ranks": 64,
        "steps": 100,
        "allreduce": "ring",
        "fabric_level": "collective",
        "optimizer": "adam",
        "lr": 0.001,
        "model_flops": 8.4e13,
        "gpu_tflops": 400.0,
        "compute_jitter": 2_000_000,
        "collective_bytes": 3_116_000_000,
        "bucket_bytes": 26_214_400,
        "unpack_time": 1_900_000,
        "optimizer_time": 10_200_000,
        "hang_timeout": 10_000_000_000,
    },
}


COMPUTE_TIME_NS_MAX = 86_400 * 10**9
"""One step's compute time at most (model_flops / gpu_tflops): a day of simulated time."""


def compute_time_ns(config: dict[str, Any]) -> int:
    """The compute kernel's duration before jitter: the FLOP model, at least 1 ns."""
    return max(1, round(config["model_flops"] / (config["gpu_tflops"] * FLOPS_PER_TFLOP_NS)))


def collective_level(config: dict[str, Any]) -> bool:
    """True when the all-reduce runs at the collective level (``fabric_level``, or auto by size)."""
    level = config["fabric_level"]
    return level == "collective" or (level == "auto" and config["ranks"] >= COLLECTIVE_LEVEL_RANKS_MIN)


def check_config(config: dict[str, Any]) -> None:
    """Cross-key rules that a single Param cannot express; raises ConfigError."""
    if config["ranks"] > RANKS_MAX:
        raise ConfigError(f"config key 'ranks': at most {RANKS_MAX}, got {config['ranks']}")
    if config["steps"] > STEPS_MAX:
        raise ConfigError(f"config key 'steps': at most {STEPS_MAX}, got {config['steps']}")
    if config["params"] > PARAMS_MAX:
        raise ConfigError(f"config key 'params': at most {PARAMS_MAX}, got {config['params']}")
    if config["oracle"] and config["reduce_order"] != "canonical":
        raise ConfigError(
            "config key 'oracle': oracle=on needs reduce_order=canonical (arrival order has no reference)"
        )
    if config["reduce_dtype"] not in DTYPES or config["dtype"] not in DTYPES:
        raise ConfigError("config keys 'dtype'/'reduce_dtype': unknown dtype")
    if config["model_flops"] / (config["gpu_tflops"] * FLOPS_PER_TFLOP_NS) > COMPUTE_TIME_NS_MAX:
        raise ConfigError(
            f"config keys 'model_flops'/'gpu_tflops': one step's compute would take more than "
            f"{COMPUTE_TIME_NS_MAX:,} ns (a day)"
        )
