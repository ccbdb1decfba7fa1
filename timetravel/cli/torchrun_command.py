"""``timetravel torchrun SCRIPT``: your torch.distributed script as N ranks under the simulator.

Shaped like torchrun; the same run is ``timetravel run torch --set script=SCRIPT --set nproc=N``, so
every command that takes a scenario works on it (docs/torch.md).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from timetravel.cli import common
from timetravel.cli.common import UsageError, add_json_argument, add_settings_argument, require_torch
from timetravel.cli.output import add_force_argument, add_record_budget_argument
from timetravel.torch.protocol.limits import NPROC_MAX, SNAPSHOT_EVERY_EVENTS_TORCH


def register(subparsers: Any) -> None:
    torchrun = subparsers.add_parser(
        "torchrun",
        help="run your torch.distributed training script as N simulated ranks",
        description=(
            "Run an unmodified torchrun-style script as N ranks (processes forked from one zygote that imported "
            "torch). The simulator owns time, the network, the order of every arrival and the faults: every "
            "collective is an event of the World, reduced in canonical or arrival order, timed by the fabric. "
            "Exit code 0 when the job passes, 1 when it fails (hang, collective mismatch, NaN, divergence, crash, "
            "exception: the failure and the command that reproduces it are printed), 2 on bad input."
        ),
    )
    _add_ranks(torchrun)
    _add_torchrun_options(torchrun)
    _add_run_options(torchrun)
    torchrun.set_defaults(func=main, launcher="torchrun")
    python = subparsers.add_parser(
        "python",
        help="run a script that starts its own ranks (torch.multiprocessing.spawn): each one simulated",
        description=(
            "Run `python SCRIPT` for a script that launches its own ranks with torch.multiprocessing.spawn "
            "or start_processes (the PyTorch DDP tutorial's non-torchrun scripts): every simulated rank runs "
            "the script, and its spawn runs the function as that rank (index = its local rank), so each "
            "spawned process is a simulated rank. --nproc-per-node is the number of processes the script "
            "spawns (torch.cuda.device_count() reports it). The code before and after the spawn runs once "
            "per rank. Exit codes as torchrun's: 0 pass, 1 a simulated failure, 2 bad input."
        ),
    )
    _add_ranks(python)
    _add_run_options(python)
    python.set_defaults(
        func=main, launcher="python", env="python", max_restarts=0, against_real=False, real_timeout=0.0
    )


def _add_ranks(parser: Any) -> None:
    common.add_count_argument(
        parser, "--nproc-per-node", "--nproc_per_node", dest="nproc", default=1, what="ranks per host"
    )
    parser.add_argument(
        "--nnodes", type=int, default=1, metavar="N", help="hosts; ranks = nproc-per-node x nnodes"
    )
    parser.add_argument(
        "-m",
        "--module",
        action="store_true",
        help="SCRIPT is a module name, run as `python -m SCRIPT` (as torchrun -m): found on the Python "
        "path (the current folder first) without importing it here",
    )


def _add_torchrun_options(parser: Any) -> None:
    parser.add_argument(
        "--standalone", action="store_true", help="accepted for torchrun compatibility (always true)"
    )
    parser.add_argument(
        "--env",
        choices=("torchrun", "slurm"),
        default="torchrun",
        help="environment the ranks see: torchrun's variables, or slurm (adds SLURM_PROCID, …)",
    )
    parser.add_argument(
        "--max-restarts",
        "--max_restarts",
        dest="max_restarts",
        type=int,
        default=0,
        metavar="K",
        help="restart every rank after a crash or exception, up to K times, as torchelastic does",
    )
    parser.add_argument(
        "--against-real",
        action="store_true",
        help="run the script under real `torchrun --standalone` (gloo, this machine) and under the "
        "simulator with cuda=off (real torch here has no CUDA), and compare per rank the loss of each "
        "optimizer step, the printed losses and the state after each step and at the end: identical, "
        "within summation order (the largest relative difference named) or differs (the first step and "
        "tensor named); exit 0 same, 1 differs, 2 a script real torch cannot run here",
    )
    parser.add_argument(
        "--real-timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="with --against-real: wall seconds real torchrun may run before it is ended (default 900)",
    )


def _add_run_options(parser: Any) -> None:
    parser.add_argument(
        "--workdir",
        metavar="DIR",
        default="",
        help="start the ranks' private working directory as a copy of DIR (default: empty); "
        "their files never reach DIR",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="the root seed that decides every choice (default 0)"
    )
    add_settings_argument(
        parser, "a torch scenario setting (repeatable): `timetravel scenarios torch` lists them"
    )
    parser.add_argument("--record", metavar="PATH.ttr", help="record the run (events, snapshots, failures)")
    add_force_argument(parser)
    add_record_budget_argument(parser)
    parser.add_argument(
        "--snapshot-every",
        type=int,
        metavar="N",
        default=SNAPSHOT_EVERY_EVENTS_TORCH,
        help=f"with --record: a snapshot every N events (default {SNAPSHOT_EVERY_EVENTS_TORCH}; a seek "
        "re-executes at most N recorded events, from the journal, without the ranks)",
    )
    add_json_argument(parser, "print one JSON object (the keys of run --json); rank output goes to stderr")
    parser.add_argument("script", metavar="SCRIPT", help="the training script (.py)")
    parser.add_argument(
        "script_args", nargs=argparse.REMAINDER, metavar="...", help="the script's own arguments"
    )


def torch_settings(args: argparse.Namespace) -> list[str]:
    """The torch scenario's settings this command line stands for (used in the reproduce command)."""
    if not 1 <= args.nproc <= NPROC_MAX:
        raise UsageError(f"--nproc-per-node must be between 1 and {NPROC_MAX}, got {args.nproc}")
    if not args.nnodes >= 1 or args.nproc * args.nnodes > NPROC_MAX:
        raise UsageError(f"--nnodes x --nproc-per-node must be between 1 and {NPROC_MAX}")
    settings = [f"script={script_path(args)}", f"nproc={args.nproc}", f"nnodes={args.nnodes}"]
    if args.module:
        settings.append(f"module={args.script}")
    if args.script_args:
        settings.append(f"args={shlex.join(args.script_args)}")
    if args.max_restarts < 0:
        raise UsageError(f"--max-restarts must be 0 or more, got {args.max_restarts}")
    if args.max_restarts:
        settings.append(f"max_restarts={args.max_restarts}")
    if args.env != "torchrun":
        settings.append(f"env_style={args.env}")  # slurm, or python for `timetravel python`
    if args.workdir:
        if not Path(args.workdir).is_dir():
            raise UsageError(f"--workdir {args.workdir!r} is not a directory")
        settings.append(f"workdir={args.workdir}")
    return [*settings, *args.settings]


def script_path(args: argparse.Namespace) -> str:
    """The file the ranks run: SCRIPT, or with -m the file of module SCRIPT (one line if neither)."""
    if args.module:
        import os

        from timetravel.torch.world.specs import module_file

        return str(module_file(args.script, [os.getcwd(), *sys.path]))
    script = Path(args.script)
    if not script.is_file():
        raise UsageError(f"script {args.script!r} is not a file")
    if script.suffix != ".py":
        raise UsageError(f"script {args.script!r} is not a Python file (.py)")
    return args.script


def main(args: argparse.Namespace) -> int:
    from timetravel.scenarios import get_scenario
    from timetravel.sim.runner import run_report
    from timetravel.torch.world.specs import launch_naming

    settings = torch_settings(args)
    if args.record:
        from timetravel.recording.files import check_output_path
        from timetravel.recording.replace import check_replaceable

        check_output_path(args.record)
        check_replaceable(args.record, force=args.force)  # before any rank starts
    require_torch()
    if args.against_real:
        from timetravel.cli import against_real_output

        return against_real_output.main(args, settings[0].removeprefix("script="))
    # the script named here may run; under --json the ranks' output goes to stderr (stdout is the JSON)
    launch = launch_naming([settings[0].removeprefix("script=")], sys.stderr if args.json else None)
    scenario = get_scenario("torch")
    config = scenario.resolve_config(settings)
    started = time.perf_counter()
    if args.record:
        from timetravel.recording import record_run
        from timetravel.recording.recorder import SNAPSHOT_EVERY_EVENTS_MIN

        if args.snapshot_every < SNAPSHOT_EVERY_EVENTS_MIN:
            raise UsageError(f"--snapshot-every must be at least {SNAPSHOT_EVERY_EVENTS_MIN} events")
        report, _world = record_run(
            scenario,
            config,
            args.seed,
            args.record,
            snapshot_every_events=args.snapshot_every,
            launch=launch,
            force=args.force,
            max_record_bytes=args.max_record_bytes,
        )
    else:
        report, _world = run_report(scenario, config, args.seed, launch=launch)
    report["wall_s"] = round(time.perf_counter() - started, 6)
    command = f"timetravel {args.launcher} " + " ".join(
        [
            f"--nproc-per-node {args.nproc}",
            *([f"--nnodes {args.nnodes}"] if args.nnodes != 1 else []),
            *([f"--max-restarts {args.max_restarts}"] if args.max_restarts else []),
            *([f"--env {args.env}"] if args.env not in ("torchrun", "python") else []),
            *([f"--workdir {shlex.quote(args.workdir)}"] if args.workdir else []),
            f"--seed {args.seed}",
            *(f"--set {shlex.quote(s)}" for s in args.settings),
            *(["-m"] if args.module else []),
            shlex.quote(args.script),
            *map(shlex.quote, args.script_args),
        ]
    )
    from timetravel.cli.run_command import print_outcome

    return print_outcome(report, command, as_json=args.json)
