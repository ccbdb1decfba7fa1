"""Run timetravel commands over hostile recordings in this one process, under a memory limit.

``python tests/hostile_runner.py BYTES_MAX SECONDS_MAX JSON`` where JSON is a list of argv lists;
prints one JSON list of {"argv", "code", "stderr", "traceback", "seconds"}. The address-space limit
(RLIMIT_AS) makes an allocation past it a MemoryError here rather than a machine out of memory;
each command is timed, and any exception the CLI lets out is recorded as a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import sys
import time
import traceback


def main() -> None:
    bytes_max, seconds_max, argvs = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (bytes_max, bytes_max))
    from timetravel.cli import main as cli_main

    results = []
    for argv in argvs:
        stderr, stdout = io.StringIO(), io.StringIO()
        started = time.perf_counter()
        trace = None
        code = None
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
            try:
                code = cli_main(argv)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 2
            except BaseException:
                trace = traceback.format_exc()
        seconds = time.perf_counter() - started
        results.append(
            {
                "argv": argv,
                "code": code,
                "stdout": stdout.getvalue()[-4000:],
                "stderr": stderr.getvalue(),
                "traceback": trace,
                "seconds": seconds,
            }
        )
        if seconds > seconds_max:
            break
    sys.__stdout__.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    main()
