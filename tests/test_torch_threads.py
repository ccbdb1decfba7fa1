"""A rank's calls to the World from several threads (issue 32, item 1).

The OS orders a rank's threads, so collectives issued from three threads gave another hash chain on
every run of one seed (once `pass` with internal KeyErrors, three times a garbled channel). The first
collective or store call from a thread other than the one that made the group ends the rank with an
`unsupported` failure naming that thread; the same failure and hash chain on every run.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.torch.world.specs import launch_naming

SCRIPT = Path(__file__).resolve().parent / "torch_scripts" / "threaded_collectives.py"
RUNS = 3


def run_threads(mode: str) -> tuple[dict, str]:
    output = io.StringIO()
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={SCRIPT}", "nproc=2", f"args={mode}", "stuck_timeout=30"])
    report, _world = run_report(scenario, config, 0, launch=launch_naming([str(SCRIPT)], output))
    return report, output.getvalue()


@pytest.mark.parametrize("mode", ["threads", "store"])
def test_calls_from_several_threads_fail_unsupported_with_the_same_hash_chain_every_run(mode: str) -> None:
    runs = [run_threads(mode) for _ in range(RUNS)]
    for report, output in runs:
        failure = report["failure"]
        assert report["outcome"] == "fail" and failure is not None, output[-2000:]
        assert failure["kind"] == "unsupported"
        assert "other than 'MainThread', which made its process group" in failure["message"]
        assert "timetravel: thread 'worker-" in output  # the thread that came first, in the rank's output
        assert "all threads done" not in output and "Traceback" not in output
    assert len({(report["hash_chain"], report["state_hash"]) for report, _output in runs}) == 1
    assert len({report["failure"]["message"] for report, _output in runs}) == 1
