"""``timetravel torchrun --against-real``: one script under real torchrun and under the simulator, compared.

:func:`against_real` runs the script under real ``torchrun --standalone`` with gloo on this machine
(world/real_torchrun.py), then under the simulator with the same arguments and rank count and
``cuda=off`` (real torch here has no CUDA: the simulator then serves none either, so the script takes
the code path real torch takes), both ranks sets captured by the same rank-side code
(rank/capture.py), and compares them per rank (world/fidelity.py). A script the host's real torch
cannot run at all (it failed before any rank made an optimizer step or printed a loss) is refused:
:class:`RealRunRefused`, one line, nothing to compare.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from timetravel.sim.scenario import ConfigError
from timetravel.torch.protocol.capture import capture_path, read_capture
from timetravel.torch.world import fidelity
from timetravel.torch.world.real_torchrun import RealRun, run_real
from timetravel.torch.world.specs import launch_naming

CAPTURE_SETTING = "capture_dir"
"""The process setting (sim/launch.py) that makes a simulated rank capture itself (rank/setup.py)."""
REAL_TIMEOUT_S_DEFAULT = 900.0
"""Wall seconds real torchrun may run before it is ended and reported as timed out."""
RANK_LINES_MAX = 1_000_000
"""Output lines kept per simulated rank (the printed losses are read from them)."""
_ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt|Exit)\b.*")


class RealRunRefused(ConfigError):
    """Real torchrun cannot run the script on this machine: there is nothing to compare with."""


class RankLines(io.TextIOBase):
    """Where the simulated ranks' output goes (``[rN] line``): kept per rank, and echoed if asked."""

    def __init__(self, echo: Any = None) -> None:
        self.lines: dict[int, list[str]] = {}
        self.echo = echo
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.echo is not None:
            self.echo.write(text)
        self._pending += text
        complete, _, self._pending = self._pending.rpartition("\n")
        for line in complete.split("\n") if complete else []:
            prefix, _, rest = line.partition("] ")
            if prefix.startswith("[r") and prefix[2:].isdigit():
                kept = self.lines.setdefault(int(prefix[2:]), [])
                if len(kept) < RANK_LINES_MAX:
                    kept.append(rest)
        return len(text)

    def flush(self) -> None:
        if self.echo is not None:
            self.echo.flush()


def scripts_returned(records: dict[int, list[dict[str, Any]]]) -> bool:
    """Whether every rank's script ran to its end (returned, or exited 0): its end record says so."""
    return all(
        any(record["kind"] == "end" and record.get("ended") == "returned" for record in rank_records)
        for rank_records in records.values()
    )


def real_error(run: RealRun, records: dict[int, list[dict[str, Any]]] | None = None) -> str | None:
    """The line that says why real torchrun failed: the first rank's last exception line. None when it
    passed, or when every rank's script returned and only the teardown after it failed (gloo's, at
    exit, now and then: SIGABRT "terminate called without an active exception"), which is no result
    of the script's (``teardown`` in the report says so)."""
    if run.timed_out:
        return "real torchrun did not finish in time (ended)"
    if run.returncode == 0 or (records is not None and scripts_returned(records)):
        return None
    for rank in sorted(run.stderr):
        for line in reversed(run.stderr[rank]):
            if _ERROR_LINE.match(line.strip()):
                return f"r{rank}: {line.strip()}"
    tail = [line.strip() for line in run.launcher_stderr if line.strip()]
    return f"torchrun exited {run.returncode}" + (f": {tail[-1]}" if tail else "")


def against_real(
    script: str,
    args: list[str],
    *,
    nproc: int,
    module: str = "",
    seed: int = 0,
    settings: tuple[str, ...] = (),
    workdir: str = "",
    real_timeout_s: float = REAL_TIMEOUT_S_DEFAULT,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The comparison report (see the module docstring); raises RealRunRefused. ``script`` is the file
    the ranks run; with ``module`` it is that module's, run as ``python -m module``."""
    say = progress or (lambda text: None)
    folder = tempfile.mkdtemp(prefix="timetravel-against-real-")
    try:
        real_dir, simulated_dir = f"{folder}/real", f"{folder}/simulator"
        for path in (real_dir, simulated_dir):
            os.makedirs(path)
        say(f"real torchrun --standalone --nproc-per-node {nproc} (gloo)")
        real = run_real(
            nproc,
            ("module", module) if module else ("script", os.path.abspath(script)),
            args,
            real_dir,
            workdir_source=workdir or None,
            timeout_s=real_timeout_s,
            progress=lambda wall_s: say(f"real torchrun: {wall_s:.0f} s"),
        )
        real_records = {rank: read_capture(capture_path(real_dir, rank)) for rank in range(nproc)}
        _refuse_if_real_cannot_run(real, real_records)
        say("timetravel torchrun --set cuda=off")
        report, lines, wall_s = _simulate(
            script,
            args,
            nproc,
            seed,
            (*([f"module={module}"] if module else []), *settings),
            workdir,
            simulated_dir,
        )
        simulated_records = {rank: read_capture(capture_path(simulated_dir, rank)) for rank in range(nproc)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ranks = [
        fidelity.compare_rank(
            rank,
            {"records": real_records[rank], "lines": real.stdout.get(rank, []) + real.stderr.get(rank, [])},
            {"records": simulated_records[rank], "lines": lines.get(rank, [])},
        )
        for rank in range(nproc)
    ]
    target = ["-m", module] if module else [script]
    return _report(target, args, nproc, seed, settings, real, real_records, report, wall_s, ranks)


def _refuse_if_real_cannot_run(run: RealRun, records: dict[int, list[dict[str, Any]]]) -> None:
    error = real_error(run, records)
    if error is None:
        return
    stepped = any(record["kind"] == "step" for rank_records in records.values() for record in rank_records)
    progressed = stepped or any(fidelity.printed_losses(lines) for lines in run.stdout.values())
    if not progressed:
        raise RealRunRefused(
            f"real torchrun cannot run this script on this machine ({error}): nothing to compare"
        )


def _simulate(
    script: str,
    args: list[str],
    nproc: int,
    seed: int,
    settings: tuple[str, ...],
    workdir: str,
    capture_dir: str,
) -> tuple[dict[str, Any], dict[int, list[str]], float]:
    from timetravel.scenarios import get_scenario
    from timetravel.sim.runner import run_report

    lines = RankLines()
    launch = launch_naming([script]).with_output(lines).with_process_setting(CAPTURE_SETTING, capture_dir)
    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        [
            f"script={script}",
            f"nproc={nproc}",
            *([f"args={shlex.join(args)}"] if args else []),
            *([f"workdir={workdir}"] if workdir else []),
            "cuda=off",
            *settings,
        ]
    )
    started = time.perf_counter()
    report, _world = run_report(scenario, config, seed, launch=launch)
    return report, lines.lines, round(time.perf_counter() - started, 3)


def _report(
    target: list[str],
    args: list[str],
    nproc: int,
    seed: int,
    settings: tuple[str, ...],
    real: RealRun,
    real_records: dict[int, list[dict[str, Any]]],
    simulated: dict[str, Any],
    simulated_wall_s: float,
    ranks: list[dict[str, Any]],
) -> dict[str, Any]:
    failure = simulated["failure"]
    real_error_line = real_error(real, real_records)
    outcomes_agree = (real_error_line is None) == (failure is None)
    verdict = fidelity.worst([rank["verdict"] for rank in ranks])
    if not outcomes_agree:
        verdict = "differs"
    largest = max(
        (rank[part]["max_rel_diff"] for rank in ranks for part in ("losses", "printed_losses", "state")),
        default=0.0,
    )
    return {
        "script": target[-1],
        "module": len(target) == 2,
        "args": args,
        "nproc": nproc,
        "seed": seed,
        "real": {
            "command": shlex.join(["torchrun", "--standalone", f"--nproc-per-node={nproc}", *target, *args]),
            "backend": "gloo",
            "returncode": real.returncode,
            "error": real_error_line,
            "teardown": None
            if real.returncode == 0 or real_error_line is not None
            else f"torchrun exited {real.returncode} after every rank's script returned (a crash at exit)",
            "wall_s": real.wall_s,
        },
        "simulator": {
            "command": shlex.join(
                ["timetravel", "torchrun", f"--nproc-per-node={nproc}", f"--seed={seed}", "--set", "cuda=off"]
                + [part for setting in settings for part in ("--set", setting)]
                + [*target, *args]
            ),
            "cuda": "off",
            "outcome": simulated["outcome"],
            "failure": None
            if failure is None
            else f"{failure['kind']} on {failure['node']}: {failure['message']}",
            "wall_s": simulated_wall_s,
        },
        "outcomes_agree": outcomes_agree,
        "ranks": ranks,
        "verdict": verdict,
        "max_rel_diff": largest,
        "first_difference": first_difference(ranks),
    }


def first_difference(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where the run first differs beyond summation order: the first such rank's state (step and
    tensor), else its step losses, else its printed losses; None when nothing does."""
    for rank in ranks:
        for part in ("state", "losses", "printed_losses"):
            where = rank[part]["first_difference"]
            if rank[part]["verdict"] != "differs" or where is None:
                continue
            at = where.get("at") or (
                f"step {where['step']}" if "step" in where else f"printed loss {where['number']}"
            )
            return {"rank": rank["rank"], "part": part, "at": at, "tensor": where.get("tensor")}
    return None
