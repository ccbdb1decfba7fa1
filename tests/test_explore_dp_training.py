"""Acceptance of the explore engine on the dp_training demo seed (issue 6, point 11).

The demo seed (``preset=demo`` at the preset's own seed) fails at T≈1000 ms because a fault that
starts between 950 and 1000 ms corrupts a gradient that the planted bug (``local_guard``) lets
through; ``demo.check_seed`` names that fault (the one whose removal makes the run pass). The
recording here takes a snapshot every 1024 events, so the likelihood has points a few ms apart.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from timetravel.explore import Session
from timetravel.explore.branching import branch
from timetravel.explore.compare import compare
from timetravel.explore.fanout import fanout, likelihood
from timetravel.explore.rerun import rerun
from timetravel.explore.verify_replay import replay_session
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training.demo import DemoSeed, check_seed

MS = 1_000_000
FORK = "950ms"
SNAPSHOT_EVERY = 1024
FANOUT_SAMPLES = 6
LIKELIHOOD_SAMPLES = 4
LIKELIHOOD_BEFORE_NS = 25 * MS
"""The likelihood walks the snapshots from this long before the root-cause fault to the failure."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], DemoSeed]:
    scenario = get_scenario("dp_training")
    config = scenario.resolve_config(["preset=demo"])
    seed = scenario.preset_seeds["demo"]
    evidence = check_seed(scenario, seed)
    assert evidence is not None, f"seed {seed} is no longer a demo seed (timetravel demo-seed finds another)"
    path = tmp_path_factory.mktemp("demo") / "demo.ttr"
    report, _world = record_run(scenario, config, seed, path, snapshot_every_events=SNAPSHOT_EVERY)
    assert report["failure"]["signature"] == evidence.failure["signature"]
    return path, report, evidence


@pytest.fixture
def recording(
    demo: tuple[Path, dict[str, Any], DemoSeed], tmp_path: Path
) -> tuple[Path, dict[str, Any], DemoSeed]:
    source, report, evidence = demo
    path = tmp_path / "demo.ttr"
    shutil.copy(source, path)
    return path, report, evidence


def test_a_new_future_from_950ms_passes(recording: Any) -> None:
    """Some branch keys give the root-cause fault a harmless bit to flip; the fan-out finds one,
    and the stored branch with that key passes, as the fan-out said it would."""
    path, _report, _evidence = recording
    with Session.open(path) as session:
        futures = fanout(session, FORK, FANOUT_SAMPLES, progress=(seen := []).append)
        passing = [
            int(p.detail.split(":")[0].removeprefix("key ")) for p in seen if p.detail.endswith(": pass")
        ]
        assert futures.by_signature.get("pass", 0) == len(passing) > 0
        result = branch(session, FORK, {"branch_key": passing[0]})
    assert (result.name, result.at_ns, result.outcome, result.failure) == ("b1", 950 * MS, "pass", None)
    with Session.open(path, branch="b1") as stored:
        assert replay_session(stored).verified


def test_compare_names_the_corrupting_fault(recording: Any) -> None:
    path, report, evidence = recording
    root = evidence.root_cause
    with Session.open(path) as session:
        branch(session, FORK, {"drop_faults": [root["id"]]}, name="without-root")
        result = compare(session, "main", "without-root")
    assert (result.a.outcome, result.b.outcome) == ("fail", "pass")
    assert result.a.failure is not None and result.a.failure["signature"] == report["failure"]["signature"]
    divergence = result.first_divergence
    assert divergence is not None
    assert (divergence.t_ns, divergence.node, divergence.kind) == (root["t_start"], root["target"], "fault")
    assert divergence.seq_a == divergence.seq_b


def test_likelihood_jumps_to_one_at_the_fault(recording: Any) -> None:
    path, report, evidence = recording
    root = evidence.root_cause
    with Session.open(path) as session:
        result = likelihood(
            session,
            LIKELIHOOD_SAMPLES,
            start=root["t_start"] - LIKELIHOOD_BEFORE_NS,
            end=report["failure"]["t_ns"],
        )
    before = [point for point in result.points if point.at_ns < root["t_start"]]
    after = [point for point in result.points if point.at_ns >= root["t_start"]]
    assert before and after
    assert all(point.failure_rate == 1.0 for point in after)
    assert before[-1].failure_rate < 1.0
    assert result.point_of_no_return_ns == after[0].at_ns


def test_rerun_with_the_bug_fixed_passes(recording: Any) -> None:
    path, report, _evidence = recording
    with Session.open(path) as session:
        result = rerun(session, ["bug=none"])
        schedule = session.goto("start") and session.world.faults
    assert (result.outcome, result.recorded_outcome) == ("pass", "fail")
    assert result.choices == "seed" and result.faults_pinned == len(schedule)
    assert result.first_divergence is not None and result.first_divergence.t_ns < report["failure"]["t_ns"]
