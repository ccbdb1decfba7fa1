"""``python -m timetravel.determinism.worker``: the child process of ``timetravel check-determinism``.

The parent starts it with a chosen ``PYTHONHASHSEED``; it speaks JSON lines on stdout.

* ``digests --seeds 3,4,5``: one line per seed (see :func:`trace.digest_run`), as each finishes.
* ``trace --seed 3 [--batch 7]``: one line with the batch's events, then a request/answer loop on
  stdin: ``{"state_after": INDEX or null}``, ``{"states": [NODE, ...]}`` (states as base64 of the
  packed data), ``{"quit": true}``.

Not a user command: its arguments may change between versions. Errors go to stderr and the exit
code is 1; the parent turns them into one line for the user.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from typing import Any

from timetravel.determinism.trace import RunSpec, TraceSession, digest_run

REQUEST_BYTES_MAX = 1 << 20


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m timetravel.determinism.worker")
    parser.add_argument("mode", choices=("digests", "trace"))
    parser.add_argument("--scenario-name", required=True)
    parser.add_argument("--scenario-target")
    parser.add_argument("--set", dest="settings", action="append", default=[])
    parser.add_argument("--until")
    parser.add_argument("--determinism")
    parser.add_argument("--seeds", help="comma-separated seeds (digests mode)")
    parser.add_argument("--seed", type=int, help="the seed to trace (trace mode)")
    parser.add_argument("--batch", type=int, help="the chain batch to list (trace mode; omit for none)")
    return parser


def _emit(value: Any) -> None:
    sys.stdout.write(json.dumps(value, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _serve_trace(session: TraceSession, batch: int | None) -> None:
    _emit(session.open_batch(batch))
    for line in sys.stdin:
        if len(line) > REQUEST_BYTES_MAX:
            raise ValueError("request line too long")
        request = json.loads(line)
        if request.get("quit"):
            return
        if "state_after" in request:
            _emit(session.state_after(request["state_after"]))
        elif "states" in request:
            states = session.node_states([str(name) for name in request["states"]])
            _emit(
                {
                    name: None if data is None else base64.b64encode(data).decode()
                    for name, data in states.items()
                }
            )
        else:
            raise ValueError(f"unknown request {sorted(request)}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    spec = RunSpec(
        args.scenario_name, args.scenario_target, tuple(args.settings), args.until, args.determinism
    )
    if args.mode == "digests":
        for text in (args.seeds or "").split(","):
            if text:
                _emit(digest_run(spec, int(text)))
        return 0
    if args.seed is None:
        raise SystemExit("trace mode needs --seed")
    _serve_trace(TraceSession(spec, args.seed), args.batch)
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a child process
    sys.exit(main())
