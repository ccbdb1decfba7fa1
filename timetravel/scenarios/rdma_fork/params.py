"""rdma_fork's config schema and the rules between keys.

The keys the issue names (``nodes``, ``launches_per_node``, ``launch``, ``fork_safe``, ``kernel``,
``force_fork_safe``, ``register_align``, ``register_check``, ``faults``) keep those names. Two
more, ``last_node`` and ``last_communicator``, say *which* hosts and communicators a world has:
the job runs on hosts ``n<last_node - nodes + 1>`` .. ``n<last_node>`` and each process makes
communicators ``c<last_communicator - communicators + 1>`` .. ``c<last_communicator>``. Each
host's and communicator's draws come from its own name, so the minimizer — which only lowers
shrinkable ints — can close both windows around the one host and communicator that fail (it
lowers the count, then the last index, then the count again) and keep their draws. A window
that starts at index 0 cannot drop its first member (the count then names another one and a
lower last index leaves too little room), so the communicators' default window, c6 and c7, sits
above 0; the hosts' default window is n0..n1023, and the rare seed whose culprit is n0 keeps
more hosts than one unless the choices pass finds another host that fails the same way.
"""

from __future__ import annotations

from typing import Any

from timetravel.fabric import fabric_params
from timetravel.sim import ConfigError, Param

LAUNCH_METHODS = ("fork_exec", "posix_spawn", "vfork", "mp_fork")
FORKING_LAUNCHES = ("fork_exec", "mp_fork")
"""posix_spawn and vfork share the parent's memory until exec (CLONE_VM): nothing is copied."""
ON_OFF = ("on", "off")
NODES_MAX = 65_536
COMMUNICATORS_MAX = 64
LAUNCHES_MAX = 100_000
EAGER_COPY_KERNEL = (5, 12)
"""Linux 5.12 copies pinned pages at fork (copy-on-fork for RDMA), so MADV_DONTFORK is unneeded."""

PARAMS: tuple[Param, ...] = (
    Param("nodes", "int", 1024, "hosts in the job, one training process each", minimum=1, shrinkable=True),
    Param(
        "last_node",
        "int",
        1023,
        "index of the job's last host: hosts are n<last_node-nodes+1>..n<last_node>",
        minimum=0,
        shrinkable=True,
    ),
    Param(
        "communicators",
        "int",
        2,
        "NCCL communicators per process, each registering a 4-byte flush buffer",
        minimum=1,
        shrinkable=True,
    ),
    Param(
        "last_communicator",
        "int",
        7,
        "index of the last communicator: c<last_communicator-communicators+1>..c<last_communicator>",
        minimum=0,
        shrinkable=True,
    ),
    Param(
        "registered_buffers",
        "int",
        2,
        "page-aligned data buffers (mmap'd) each process registers besides the flush buffers",
        minimum=0,
        shrinkable=True,
    ),
    Param("launches_per_node", "int", 8, "subprocess launches per process", minimum=1, shrinkable=True),
    Param("launch_every", "time", 30_000_000_000, "time between one process's launches", minimum=1),
    Param(
        "launch_jitter",
        "time",
        5_000_000_000,
        "extra delay before each launch, drawn in [0, jitter] (site rdma.launch.jitter)",
    ),
    Param(
        "helpers",
        "str",
        "data_loader,checkpoint_uploader,profiler",
        "comma-separated helper programs the launches cycle through",
    ),
    Param(
        "launch",
        "str",
        "fork_exec",
        "fork_exec (subprocess with close_fds), posix_spawn, vfork, or mp_fork (a worker that keeps running Python)",
        choices=LAUNCH_METHODS,
        branchable=True,
    ),
    Param("fork_safe", "str", "on", "the RDMA library asks for fork safety (ibv_fork_init)", choices=ON_OFF),
    Param("kernel", "str", "5.4", "Linux version; 5.12 and later copy pinned pages at fork"),
    Param(
        "force_fork_safe",
        "str",
        "on",
        "RDMAV_FORK_SAFE set in the environment: MADV_DONTFORK even on a kernel that copies pinned pages",
        choices=ON_OFF,
    ),
    Param(
        "register_align",
        "str",
        "none",
        "none: the flush buffer lives in the malloc'd communicator struct; page: its own page-aligned mmap",
        choices=("none", "page"),
    ),
    Param(
        "register_check",
        "str",
        "off",
        "strict: refuse a registration that is not page-aligned while fork safety marks pages DONTFORK",
        choices=("off", "strict"),
    ),
    *fabric_params(gpus_per_host=1, faults_window=240_000_000_000),
)


def kernel_version(text: str) -> tuple[int, int]:
    """``5.15`` -> (5, 15); anything else is a ConfigError naming the key."""
    parts = text.strip().split(".")
    try:
        numbers = [int(part) for part in parts[:2]]
    except ValueError:
        numbers = []
    if len(numbers) != 2 or min(numbers) < 0:
        raise ConfigError(f"config key 'kernel': expected a version like 5.4 or 5.15, got {text!r}")
    return numbers[0], numbers[1]


def dontfork_applies(config: dict[str, Any]) -> bool:
    """Does registration mark pages MADV_DONTFORK? Fork safety on, and either an old kernel or forced."""
    if config["fork_safe"] != "on":
        return False
    return kernel_version(config["kernel"]) < EAGER_COPY_KERNEL or config["force_fork_safe"] == "on"


def helper_names(config: dict[str, Any]) -> list[str]:
    names = [word.strip() for word in config["helpers"].split(",") if word.strip()]
    if not names:
        raise ConfigError("config key 'helpers': name at least one helper program")
    return names


def check_config(config: dict[str, Any]) -> None:
    """Cross-key rules; raises ConfigError with one line naming the keys."""
    kernel_version(config["kernel"])
    helper_names(config)
    if config["nodes"] > NODES_MAX:
        raise ConfigError(f"config key 'nodes': at most {NODES_MAX}, got {config['nodes']}")
    if config["nodes"] > config["last_node"] + 1:
        raise ConfigError(
            f"config key 'last_node': {config['last_node']} leaves no room for {config['nodes']} nodes "
            f"(hosts are n<last_node-nodes+1>..n<last_node>; set last_node={config['nodes'] - 1} or more)"
        )
    if config["communicators"] > COMMUNICATORS_MAX:
        raise ConfigError(
            f"config key 'communicators': at most {COMMUNICATORS_MAX}, got {config['communicators']}"
        )
    if config["communicators"] > config["last_communicator"] + 1:
        raise ConfigError(
            f"config key 'last_communicator': {config['last_communicator']} leaves no room for "
            f"{config['communicators']} communicators (set last_communicator={config['communicators'] - 1} or more)"
        )
    if config["registered_buffers"] > COMMUNICATORS_MAX:
        raise ConfigError(f"config key 'registered_buffers': at most {COMMUNICATORS_MAX}")
    if config["launches_per_node"] > LAUNCHES_MAX:
        raise ConfigError(f"config key 'launches_per_node': at most {LAUNCHES_MAX}")


def node_names(config: dict[str, Any]) -> list[str]:
    first = config["last_node"] - config["nodes"] + 1
    return [f"n{index}" for index in range(first, config["last_node"] + 1)]


def communicator_names(config: dict[str, Any]) -> list[str]:
    first = config["last_communicator"] - config["communicators"] + 1
    return [f"c{index}" for index in range(first, config["last_communicator"] + 1)]
