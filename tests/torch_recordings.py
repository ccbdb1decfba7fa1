"""Recording a torch script through the real CLI, as a user does: `timetravel torchrun --record`.

Several test modules need a small recording of docs/examples/torch/ddp_mlp.py (or of a copy of it)
made by a separate process, so that nothing of the recording run leaks into the test's own process.
They share this one way of making it, so a change to the torchrun command line is made once; and the
one way of running the CLI in a process of its own (``timetravel_process``: torchrun's JSON report under
another hash seed, ``explain`` from the recording's folder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"
TIMETRAVEL = [sys.executable, "-m", "timetravel"]
RECORD_TIMEOUT_S = 300


def record_torchrun(
    recording: Path,
    script: Path,
    script_arguments: Sequence[str] = ("--steps", "2"),
    *,
    nproc: int = 2,
    options: Sequence[str] = (),
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `timetravel torchrun --nproc-per-node N [options] --record FILE SCRIPT ARGS` and return it."""
    command = ["torchrun", "--nproc-per-node", str(nproc), *options]
    command += ["--record", str(recording), str(script), *script_arguments]
    return timetravel_process(command, cwd=cwd, env=env)


def timetravel_process(
    arguments: Sequence[str],
    *,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    timeout_s: int = RECORD_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """`timetravel ARGUMENTS` in a process of its own, from CWD (the environment ENV, else this one's)."""
    return subprocess.run(
        [*TIMETRAVEL, *arguments],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=cwd,
        env=None if env is None else dict(env),
    )


def torchrun_json(
    arguments: Sequence[str], hash_seed: str, *, returncode: int = 0, timeout_s: int = RECORD_TIMEOUT_S
) -> dict:
    """`timetravel torchrun --json ARGUMENTS` in a process of its own under ``PYTHONHASHSEED=HASH_SEED``,
    from the repository's root: its report, once its exit code is RETURNCODE (its stderr says why not)."""
    environment = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = timetravel_process(["torchrun", "--json", *arguments], env=environment, timeout_s=timeout_s)
    assert done.returncode == returncode, done.stderr
    return json.loads(done.stdout)


def explain_process(
    recording: Path, *options: str, timeout_s: int = RECORD_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """`timetravel explain RECORDING OPTIONS` in a process of its own, from the recording's folder."""
    return timetravel_process(
        ["explain", str(recording), *options], cwd=recording.parent, timeout_s=timeout_s
    )


REAL_TORCHRUN_ATTEMPTS = 3


def real_torchrun(
    script: Path, nproc: int, script_arguments: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    """Run SCRIPT under real ``torchrun --standalone`` with gloo (the reference the simulator's numbers
    are held to). Real gloo on loopback aborts now and then on a loaded machine (SIGABRT in a rank):
    that is the reference's flake, not the simulator's, so it gets a few attempts; the last is returned."""
    environment = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    for _attempt in range(REAL_TORCHRUN_ATTEMPTS):
        real = subprocess.run(
            [*command, str(script), *script_arguments],
            capture_output=True,
            text=True,
            timeout=RECORD_TIMEOUT_S,
            cwd=ROOT,
            env=environment,
        )
        if real.returncode == 0:
            break
    return real
