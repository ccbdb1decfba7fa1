"""A pytest plugin: ``@pytest.mark.timetravel(nproc=N)`` runs a test as N simulated ranks.

The marked test function is the rank body (module level, no fixtures: each rank imports it by name).
By default it runs on seed 0; ``--timetravel-seeds A:B`` runs it on every seed in ``[A, B)`` and, for the
first seed that fails, fails the test with the failure and the call that reproduces it. Loaded through
the ``pytest11`` entry point; importing it imports neither torch nor the simulator.
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    parser.getgroup("timetravel").addoption(
        "--timetravel-seeds",
        default="0:1",
        metavar="A:B",
        help="run tests marked timetravel on seeds A..B-1 of the simulator (default 0:1)",
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", "timetravel(nproc=2, **settings): run the test as N simulated torch ranks"
    )


def _seeds(text: str) -> range:
    first, separator, last = text.partition(":")
    try:
        return range(int(first), int(last)) if separator else range(int(first), int(first) + 1)
    except ValueError:
        raise pytest.UsageError(f"--timetravel-seeds expects A:B, got {text!r}") from None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> bool | None:
    marker = pyfuncitem.get_closest_marker("timetravel")
    if marker is None:
        return None
    from timetravel.torch.api import simulate

    options = dict(marker.kwargs)
    nproc = int(options.pop("nproc", marker.args[0] if marker.args else 2))
    for seed in _seeds(pyfuncitem.config.getoption("--timetravel-seeds")):
        run = simulate(pyfuncitem.obj, nproc=nproc, seed=seed, **options)
        if not run.passed:
            failure = run.failure or {}
            pytest.fail(
                f"seed {seed}: {failure.get('kind')} on {failure.get('node')}: {failure.get('message')}\n"
                f"reproduce: pytest {pyfuncitem.nodeid} --timetravel-seeds {seed}:{seed + 1}",
                pytrace=False,
            )
    return True
