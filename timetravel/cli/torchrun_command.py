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

from timetravel.cli.common import UsageError, add_json_argument, add_settings_argument, require_torch
from timetravel.cli.output import add_force_argument, add_record_budget_argument
from timetravel.torch.protocol.limits import NPROC_MAX, SNAPSHOT_EVERY_EVENTS_TORCH


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
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
    parser.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc",
        type=int,
        default=1,
        metavar="N",
        help="ranks per host (default 1)",
    )
    parser.add_argument(
        "--nnodes", type=int, default=1, metavar="N", help="hosts; ranks = nproc-per-node x nnodes"
    )
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
    parser.set_defaults(func=main)


def torch_settings(args: argparse.Namespace) -> list[str]:
    """The torch scenario's settings this command line stands for (used in the reproduce command)."""
    if not 1 <= args.nproc <= NPROC_MAX:
        raise UsageError(f"--nproc-per-node must be between 1 and {NPROC_MAX}, got {args.nproc}")
    if not args.nnodes >= 1 or args.nproc * args.nnodes > NPROC_MAX:
        raise UsageError(f"--nnodes x --nproc-per-node must be between 1 and {NPROC_MAX}")
    script = Path(args.script)
    if not script.is_file():
        raise UsageError(f"script {args.script!r} is not a file")
    if script.suffix != ".py":
        raise UsageError(f"script {args.script!r} is not a Python file (.py)")
    settings = [f"script={args.script}", f"nproc={args.nproc}", f"nnodes={args.nnodes}"]
    if args.script_args:
        settings.append(f"args={shlex.join(args.script_args)}")
    if args.max_restarts < 0:
        raise UsageError(f"--max-restarts must be 0 or more, got {args.max_restarts}")
    if args.max_restarts:
        settings.append(f"max_restarts={args.max_restarts}")
    if args.env != "torchrun":
        settings.append(f"env_style={args.env}")
    if args.workdir:
        if not Path(args.workdir).is_dir():
            raise UsageError(f"--workdir {args.workdir!r} is not a directory")
        settings.append(f"workdir={args.workdir}")
    return [*settings, *args.settings]


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
    # the script named here may run; under --json the ranks' output goes to stderr (stdout is the JSON)
    launch = launch_naming([args.script], sys.stderr if args.json else None)
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
    command = "timetravel torchrun " + " ".join(
        [
            f"--nproc-per-node {args.nproc}",
            *([f"--nnodes {args.nnodes}"] if args.nnodes != 1 else []),
            *([f"--max-restarts {args.max_restarts}"] if args.max_restarts else []),
            *([f"--env {args.env}"] if args.env != "torchrun" else []),
            *([f"--workdir {shlex.quote(args.workdir)}"] if args.workdir else []),
            f"--seed {args.seed}",
            *(f"--set {shlex.quote(s)}" for s in args.settings),
            shlex.quote(args.script),
            *map(shlex.quote, args.script_args),
        ]
    )
    from timetravel.cli.run_command import print_outcome

    return print_outcome(report, command, as_json=args.json)
