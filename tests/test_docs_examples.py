"""The tutorial in docs/writing-a-scenario.md stays true: its example runs as the page says."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from timetravel.sim import Simulation, format_time_auto

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"


@pytest.fixture(scope="module")
def register() -> Any:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import replicated_register

        yield replicated_register.SCENARIO
    finally:
        sys.path.remove(str(EXAMPLES))


def test_the_tutorial_seeds_fail_and_pass_as_documented(register: Any) -> None:
    config = register.resolve_config({})
    outcomes = {}
    for seed in range(10):
        result = Simulation(register, register.build(config, seed)).run()
        outcomes[seed] = result.outcome
    assert [seed for seed, outcome in outcomes.items() if outcome == "fail"] == [0, 3, 4, 8, 9]


def test_the_tutorial_diagnosis_and_fix(register: Any) -> None:
    config = register.resolve_config({})
    log: list[list[Any]] = []
    result = Simulation(register, register.build(config, 3), choice_log=log).run()
    assert result.failure is not None and result.failure["message"] == "read 3 after writing 4"
    assert format_time_auto(result.t_end_ns) == "461.689us"
    assert ["primary", "net.jitter", 6, 9496] in log
    pinned = Simulation(
        register, register.build(config, 3), overrides={("primary", "net.jitter", 6): 0}
    ).run()
    assert pinned.failure is not None and pinned.failure["message"] == "read 9 after writing 10"
    fixed = Simulation(register, register.build(register.resolve_config(["ack=replicated"]), 3)).run()
    assert fixed.outcome == "pass"


def test_the_tutorial_command_line(run_cli: Any) -> None:
    target = "replicated_register:SCENARIO"
    env = {"PYTHONPATH": str(EXAMPLES)}
    completed = run_cli("run", "replicated_register", "--scenario", target, "--seed", "3", "--json", env=env)
    assert completed.returncode == 1
    report = json.loads(completed.stdout)
    assert report["hash_chain"] == "c8874af32d371ca2f8920b6b86627bac"
    assert report["failure"]["signature"] == "assertion:register.read_your_writes"
    mismatch = run_cli("run", "pingpong", "--scenario", target, env=env)
    assert mismatch.returncode == 2 and "not 'pingpong'" in mismatch.stderr
