"""What a rank process is: the script it may run, the spec it is forked with, and the key that names it.

A rank node of the World stands for a process running the user's script. This module says, as
plain data, which process that is:

* :func:`script_to_run` — the file a world's ranks execute, only if the user named it (sim/launch.py):
  a recording or a database never runs code on its own;
* :func:`rank_specs` — what each forked rank is told (environment, argv, settings, working directory);
* :func:`rank_key` — what a world's rank processes have been handed so far, which is what they are:
  two worlds with one key hold the same processes (checkpoints are found by it).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import xxhash

from timetravel.sim.encoding import pack
from timetravel.sim.launch import Launch
from timetravel.sim.scenario import ConfigError, NotAuthorizedError
from timetravel.sim.world import World
from timetravel.torch.protocol.limits import NPROC_MAX
from timetravel.torch.world.memory import check_memory_setting, rank_memory_bytes
from timetravel.torch.world.params import BRANCHABLE_KEYS, PYTHON_HASH_SEED_DEFAULT

SCRIPT_BYTES_MAX = 64 * 1024 * 1024
C10D_NODE = "c10d"
FUNCTION_PREFIX = "function:"
"""How a Python function target is named in a Launch (``function:module:qualname``)."""


def script_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def resolved(path: str) -> str:
    return str(Path(path).resolve())


def check_config(config: dict[str, Any]) -> None:
    """What a torch world's config must be before any rank can start (no opt-in looked at here)."""
    ranks = config["nproc"] * config["nnodes"]
    if ranks > NPROC_MAX:
        raise ConfigError(f"{ranks} ranks is above the limit {NPROC_MAX}")
    check_memory_setting(config.get("rank_memory_max", "auto"))
    if config["function"]:
        return
    if not config["script"]:
        raise ConfigError(
            "the torch scenario needs a script: --set script=PATH (or timetravel torchrun SCRIPT)"
        )
    try:
        shlex.split(config["args"])
    except ValueError as error:
        raise ConfigError(f"config key 'args': {error}") from None


def script_to_run(config: dict[str, Any], launch: Launch) -> Path | None:
    """The file every rank of a world with ``config`` executes (None: a Python function target), or
    the one-line reason it may not run: the user named neither it nor, for a recording, a ``--script``."""
    check_config(config)
    if config["function"]:
        if not launch.allows(FUNCTION_PREFIX + config["function"]):
            raise NotAuthorizedError(
                f"function {config['function']!r} was not named by timetravel.torch.simulate in this process"
            )
        return None
    text = config["script"]
    refusal = launch.refusal_for(resolved(text))
    if refusal is not None:
        raise NotAuthorizedError(refusal)
    path = Path(launch.file_for(resolved(text)) or text)
    check_script_file(path, text)
    if not launch.allows(resolved(str(path))):
        raise NotAuthorizedError(
            f"script {text!r} was not named on the command line: a recording or database never runs code "
            "(name it: timetravel torchrun SCRIPT, or --set script=SCRIPT on run, fuzz, check-determinism, faults)"
        )
    return path


MODULE_NAME_PARTS_MAX = 32


def module_file(name: str, search: Iterable[str]) -> Path:
    """The file ``python -m NAME`` runs, found without importing anything (no code of the user runs
    here): ``A/B/C.py`` or the package ``A/B/C/__main__.py`` under the first entry of ``search`` that
    holds it (regular or namespace packages; zip imports are not looked in)."""
    parts = name.split(".")
    if not name or len(parts) > MODULE_NAME_PARTS_MAX or not all(part.isidentifier() for part in parts):
        raise ConfigError(f"module {name!r} is not a dotted Python module name")
    for entry in search:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__main__.py"):
            if candidate.is_file():
                return candidate
    raise ConfigError(f"module {name!r} was not found as a .py file on the Python path (python -m {name})")


def check_script_file(path: Path, text: str, label: str = "script") -> None:
    """A script must be a ``.py`` file of at most SCRIPT_BYTES_MAX bytes (one line naming ``label``)."""
    if not path.is_file():
        raise ConfigError(f"{label} {text!r} is not a file")
    if path.suffix != ".py":
        raise ConfigError(f"{label} {text!r} is not a Python file (.py)")
    if path.stat().st_size > SCRIPT_BYTES_MAX:
        raise ConfigError(f"{label} {text!r} is larger than {SCRIPT_BYTES_MAX} bytes")


def rank_specs(
    config: dict[str, Any],
    seed: int,
    restarts: int,
    *,
    cwd: str,
    script: Path | None,
    extra_settings: dict[int, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """What each forked rank is told: its environment, argv, settings and working directory ``cwd``
    (plain data). ``extra_settings``: per rank, settings added for one execution (explain's probe)."""
    ranks = config["nproc"] * config["nnodes"]
    memory_max_bytes = rank_memory_bytes(config.get("rank_memory_max", "auto"), ranks)
    base = {
        key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "TORCHELASTIC_"))
    }
    return [
        {
            "rank": rank,
            "local_rank": rank % config["nproc"],
            "local_world_size": config["nproc"],
            "env": _environment(base, config, seed, rank, restarts, cwd),
            "script": str(script.resolve()) if script is not None else "",
            "function": config["function"],
            "module": config["module"],
            "sys_path": [os.path.abspath(entry) for entry in sys.path] if config["function"] else [],
            "cwd": cwd,
            "args": shlex.split(config["args"]),
            "seed": seed,
            "restarts": restarts,
            "memory_max_bytes": memory_max_bytes,
            "settings": {**_rank_settings(config), **(extra_settings or {}).get(rank, {})},
        }
        for rank in range(ranks)
    ]


KEPT_UNDER_PYTHON = ("OMP_NUM_THREADS", "TIMETRAVEL_RANK", "TIMETRAVEL_LAUNCH_DIR", "PWD")
"""What a rank of ``timetravel python`` has beside the user's environment: none of torchrun's variables."""


def _environment(
    base: dict[str, str], config: dict[str, Any], seed: int, rank: int, restarts: int, cwd: str
) -> dict[str, str]:
    """What torchrun (or a Slurm launcher) would put in the rank's environment; under ``timetravel
    python`` (env_style python) what ``python SCRIPT`` has, the script's spawn giving each rank its index."""
    ranks = config["nproc"] * config["nnodes"]
    local = rank % config["nproc"]
    env = dict(base)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(ranks),
        LOCAL_RANK=str(local),
        LOCAL_WORLD_SIZE=str(config["nproc"]),
        GROUP_RANK=str(rank // config["nproc"]),
        GROUP_WORLD_SIZE=str(config["nnodes"]),
        ROLE_NAME="default",
        ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=str(ranks),
        MASTER_ADDR="localhost",
        MASTER_PORT="29500",
        TORCHELASTIC_RESTART_COUNT=str(restarts),
        TORCHELASTIC_MAX_RESTARTS=str(config["max_restarts"]),
        TORCHELASTIC_RUN_ID=f"timetravel-{seed}",
        TORCHELASTIC_USE_AGENT_STORE="True",  # the store is the World's: every rank a client of it
        TORCHELASTIC_SIGNALS_TO_HANDLE="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        TORCH_NCCL_ASYNC_ERROR_HANDLING="1",
        TORCH_DIST_INIT_BARRIER="0",
        OMP_NUM_THREADS="1",
        TIMETRAVEL_RANK=str(rank),
        TIMETRAVEL_LAUNCH_DIR=os.getcwd(),
        PWD=cwd,
        PYTHONHASHSEED=str(config.get("python_hash_seed", PYTHON_HASH_SEED_DEFAULT)),  # the zygote's
    )
    if config["env_style"] == "python":  # `python SCRIPT`: it spawns its own ranks (rank/env/spawn.py)
        return {**base, **{key: env[key] for key in KEPT_UNDER_PYTHON}, "TIMETRAVEL_LAUNCHER": "python"}
    if config["env_style"] == "slurm":
        env.update(
            SLURM_PROCID=str(rank),
            SLURM_LOCALID=str(local),
            SLURM_NTASKS=str(ranks),
            SLURM_NODEID=str(rank // config["nproc"]),
        )
    return env


def _rank_settings(config: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "detect_divergence",
        "detect_resume_mismatch",
        "detect_silent_corruption",
        "compile",
        "cuda",
        "compute_model",
        "compute_flops_per_s",
        "state_every_steps",
        "state_bytes_max",
    )
    return {key: config[key] for key in keys}


def rank_states(world: World) -> list[dict[str, Any]]:
    return [world.nodes[f"r{rank}"] for rank in range(world.nodes[C10D_NODE]["ranks"])]


_SPEC_KEYS_EXCLUDED = BRANCHABLE_KEYS | {"rank_output"}
"""Config a rank process never sees (a branch may change it: the World applies it)."""


def _spec_digest(config: dict[str, Any]) -> str:
    """Everything else in the config: two recordings of one script with other arguments, rank counts
    or settings start different processes, even while the World has handed them the same results."""
    kept = {key: config[key] for key in sorted(config) if key not in _SPEC_KEYS_EXCLUDED}
    return xxhash.xxh3_64_hexdigest(pack(kept))


def rank_key(world: World) -> str:
    """What the rank processes of ``world`` are: the seed, the script, the config they start from and,
    per rank, its incarnation and the digest of every result handed to it (``ranks.rank_state``).
    Per rank it counts the results *released* to it (:func:`released`), not only those its poll
    handed over: a rank's process runs ahead of the World by the result on its way, and two worlds
    whose ranks were handed the same results hold the same processes (once quiesced).
    Config that a branch may change is not part of it: until a change reaches a rank as a different
    result, the process is the same. Checkpoints are shared by every Session of a process, so the
    key must tell apart runs of other recordings too (a run with ``--steps 10`` resumed for one with
    ``--steps 8`` of the same seed trained two steps too many)."""
    c10d_state = world.nodes[C10D_NODE]
    parts = [str(world.seed), str(c10d_state["script_sha256"]), _spec_digest(world.config)]
    for rank, state in enumerate(rank_states(world)):
        chain = c10d_state["received"].get(str(rank), {})
        handed = released(world, rank)
        parts.append(f"{state['incarnation']}:{handed}:{chain.get(str(handed), '')}")
        parts.append(str(state["status"]))
    return xxhash.xxh3_128_hexdigest("|".join(parts).encode())


def released(world: World, rank: int) -> int:
    """How many results the World has released to ``rank``'s process: its ``delivered`` count, or
    one more while a result is on its way to the rank's poll. The host sends a result as soon as it
    is released (``RankDriver.offer``), so this is what the process has been handed."""
    delivered = int(world.nodes[f"r{rank}"]["delivered"])
    entry = world.nodes[C10D_NODE]["delivering"].get(str(rank))
    return max(delivered, int(entry["number"])) if entry is not None else delivered


def named_scripts(settings: Iterable[str]) -> tuple[str, ...]:
    """The scripts a command line names with ``--set script=PATH`` (its user's opt-in to run them)."""
    return tuple(setting.partition("=")[2] for setting in settings if setting.startswith("script="))


def launch_naming(scripts: Iterable[str], output: Any = None) -> Launch:
    """What a command line launches when it names ``scripts`` (sim/launch.py): each may run."""
    return Launch(code=frozenset(resolved(path) for path in scripts), output=output)


def launch_naming_function(target: str) -> Launch:
    """What ``timetravel.torch.simulate(fn)`` launches: the function ``module:qualname`` may run."""
    return Launch(code=frozenset({FUNCTION_PREFIX + target}))
