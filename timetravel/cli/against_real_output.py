"""``timetravel torchrun --against-real``: run the comparison and print it (text, or ``--json``).

Exit codes as elsewhere: 0 the simulator gave real torch's numbers (identical, or different only as
summation order moves floats), 1 they differ (the first step and tensor are printed), 2 bad input —
a script the host's real torch cannot run at all included (one line).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from timetravel.cli.common import UsageError, print_json
from timetravel.cli.progress import ProgressLine

EXIT_SAME = 0
EXIT_DIFFERS = 1
VERDICT_WORDS = {
    "identical": "identical",
    "summation_order": "within summation order",
    "differs": "DIFFERS",
    "none": "nothing to compare",
}


def check_options(args: argparse.Namespace) -> None:
    """What --against-real cannot do, refused in one line before anything runs."""
    if args.record:
        raise UsageError("--against-real compares two runs and records neither: drop --record")
    if args.max_restarts:
        raise UsageError("--against-real runs real torchrun without restarts: drop --max-restarts")
    if args.nnodes != 1:
        raise UsageError("--against-real runs real torchrun --standalone on this machine: one node only")
    if args.env != "torchrun":
        raise UsageError("--against-real compares with real torchrun: --env slurm has no real side here")
    if any(setting.replace(" ", "").startswith("cuda=") for setting in args.settings):
        raise UsageError("--against-real sets cuda=off itself (real torch on this host has no CUDA)")
    if args.real_timeout <= 0:
        raise UsageError(f"--real-timeout must be above 0 seconds, got {args.real_timeout}")


def main(args: argparse.Namespace, script: str) -> int:
    from timetravel.torch.world.against_real import against_real

    check_options(args)
    line = ProgressLine()

    def progress(text: str) -> None:
        """A phase on its own line; real torchrun's elapsed seconds on the progress line (a terminal)."""
        if text.startswith("real torchrun:"):
            line.update(-1, None, text)
        else:
            line.close()
            print(f"against-real: {text} ...", file=sys.stderr, flush=True)

    with line:
        report = against_real(
            script,
            list(args.script_args),
            module=args.script if args.module else "",
            nproc=args.nproc,
            seed=args.seed,
            settings=tuple(args.settings),
            workdir=args.workdir,
            real_timeout_s=args.real_timeout,
            progress=progress,
        )
    report = plain_numbers(report)
    if args.json:
        print_json(report)
    else:
        print_text(report)
    return EXIT_DIFFERS if report["verdict"] == "differs" else EXIT_SAME


def plain_numbers(value: Any) -> Any:
    """JSON has no infinity: a relative difference that is unbounded (another shape, NaN on one side)
    is the string ``"inf"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else str(value)
    if isinstance(value, dict):
        return {key: plain_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_numbers(item) for item in value]
    return value


def print_text(report: dict[str, Any]) -> None:
    real, simulated = report["real"], report["simulator"]
    print(f"against real torchrun: {' '.join([report['script'], *report['args']])}, {report['nproc']} ranks")
    real_outcome = "exit 0" if real["error"] is None else f"FAIL {real['error']}"
    if real["teardown"]:
        real_outcome = f"scripts returned; {real['teardown']}"
    print(f"  real:      {real['command']} (backend gloo): {real_outcome} in {real['wall_s']:.1f} s")
    simulated_outcome = "pass" if simulated["failure"] is None else f"FAIL {simulated['failure']}"
    print(f"  simulator: {simulated['command']}: {simulated_outcome} in {simulated['wall_s']:.1f} s")
    print(
        "             (CUDA unmapped, cuda=off: real torch on this host has no CUDA, so neither does the simulator)"
    )
    for rank in report["ranks"]:
        state = rank["state"]
        steps = state["steps"]
        print(f"r{rank['rank']}: {steps['real']} optimizer steps real, {steps['simulator']} simulated")
        print(f"  losses per step:  {_part(rank['losses'], 'step', 'step')}")
        print(f"  printed losses:   {_part(rank['printed_losses'], 'number', 'printed loss')}")
        where = f" ({state['tensors']} tensors, last compared at {state['final']})" if state["final"] else ""
        print(f"  state{where}: {_state(state)}")
    if not report["outcomes_agree"]:
        print("outcomes differ: real torchrun and the simulator did not both pass")
    verdict = VERDICT_WORDS[report["verdict"]]
    if report["verdict"] == "summation_order":
        verdict += f" (largest relative difference {_number(report['max_rel_diff'])})"
    if report["verdict"] == "differs":
        verdict += _first_difference(report)
    print(f"verdict: {verdict}")


def _first_difference(report: dict[str, Any]) -> str:
    first = report["first_difference"]
    if first is None:
        return ": the outcomes" if not report["outcomes_agree"] else ""
    tensor = f", tensor {first['tensor']}" if first.get("tensor") else ""
    what = "the loss of " if first["part"] == "losses" else ""
    return f": first at {what}{first['at']}{tensor} on r{first['rank']}"


def _part(part: dict[str, Any], key: str, unit: str) -> str:
    count = part["count"]
    text = f"{VERDICT_WORDS[part['verdict']]} ({count['real']} real, {count['simulator']} simulated)"
    if part["verdict"] == "summation_order":
        text += f", largest relative difference {_number(part['max_rel_diff'])}"
    first = part["first_difference"]
    if part["verdict"] == "differs" and first is not None:
        if first.get("missing"):
            text += f"; {unit} {first[key]} is on one side only"
        else:
            text += (
                f"; first at {unit} {first[key]}: real {first['real']}, simulator {first['simulator']}"
                f" (relative difference {_number(first['rel_diff'])})"
            )
    return text


def _state(state: dict[str, Any]) -> str:
    text = VERDICT_WORDS[state["verdict"]]
    if state["verdict"] == "summation_order":
        text += f", largest relative difference {_number(state['max_rel_diff'])}"
    first = state["first_difference"]
    if state["verdict"] == "differs" and first is not None:
        tensor = f" tensor {first['tensor']}" if "tensor" in first else ""
        why = first.get("why") or f"relative difference {_number(first.get('rel_diff', 'inf'))}"
        text += f"; first at {first['at']}{tensor}: {why}"
    return text


def _number(value: Any) -> str:
    return value if isinstance(value, str) else f"{value:.3g}"
