"""The demo preset's own seed is a demo seed (a code change that shifts choices breaks this test:
then ``timetravel demo-seed`` finds the next one; docs/scenarios/dp_training.md, "The demo")."""

from __future__ import annotations

import json
from typing import Any

from timetravel.scenarios.dp_training import demo
from timetravel.scenarios.dp_training.params import DEMO_SEED


def test_the_demo_preset_reproduces_its_demo_seed(run_cli: Any) -> None:
    completed = run_cli("run", "dp_training", "--set", "preset=demo", "--json")
    assert completed.returncode == 1  # the demo fails, on purpose
    report = json.loads(completed.stdout)
    assert report["seed"] == DEMO_SEED
    failure = report["failure"]
    assert demo.DETECTED_FROM_NS <= failure["t_ns"] <= demo.DETECTED_UNTIL_NS
    assert failure["signature"] == "divergence:dp_training.divergence"
    assert f"--seed {DEMO_SEED} --set preset=demo" in completed.stderr  # the reproduce line
    # issue 15: the summary counts what happened: r3 skipped a step alone (rank 0 did not)
    summary = report["summary"]
    assert summary["skipped_steps"] == 1 and summary["skipped_alone"] == {failure["node"]: 1}


def test_the_demo_seed_meets_every_demo_condition(run_cli: Any) -> None:
    completed = run_cli("demo-seed", "--check", str(DEMO_SEED), "--json")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    (evidence,) = json.loads(completed.stdout)
    cause = evidence["root_cause"]
    assert cause["kind"] == "corrupt" and cause["params"]["buffer"] == "grad"
    assert demo.FAULT_AFTER_NS < cause["t_start"] < demo.FAULT_BEFORE_NS
    assert evidence["detection_step"] - evidence["fault_step"] >= demo.DETECTION_STEPS_MIN
    assert cause["target"] == evidence["failure"]["node"]  # the corrupted rank is the one that drifted


def test_demo_seed_refuses_a_bad_range(run_cli: Any) -> None:
    completed = run_cli("demo-seed", "--count", "0")
    assert completed.returncode == 2 and completed.stderr.startswith("timetravel: error: --from")
