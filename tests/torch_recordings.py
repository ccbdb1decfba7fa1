"""Recording a torch script through the real CLI, as a user does: `timetravel torchrun --record`.

Several test modules need a small recording of docs/examples/torch/ddp_mlp.py (or of a copy of it)
made by a separate process, so that nothing of the recording run leaks into the test's own process.
They share this one way of making it, so a change to the torchrun command line is made once.
"""

from __future__ import annotations

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
    command = [*TIMETRAVEL, "torchrun", "--nproc-per-node", str(nproc), *options]
    command += ["--record", str(recording), str(script), *script_arguments]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=RECORD_TIMEOUT_S,
        cwd=cwd,
        env=None if env is None else dict(env),
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
