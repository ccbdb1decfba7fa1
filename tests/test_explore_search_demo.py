"""The issue's acceptance on the dp_training demo seed: find-first names the first step where the
replicas differ, and the rank, long before the replica check fails the run.

The story (docs/scenarios/dp_training.md): fault f2 flips a bit of r3's gradient at 985 ms; with the
planted bug ``local_guard`` r3 alone skips that step and the other 15 ranks apply it; the replica
check after step 110 fails the run at 1029 ms. A recording of the demo is 64,278 events, so these
tests are marked slow (CI runs them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import slow_size
from timetravel.explore import Session
from timetravel.explore.commands import CommandContext, run_line
from timetravel.explore.paths import world_tree
from timetravel.explore.predicates import parse_predicate
from timetravel.explore.search import find_first
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training.params import DEMO_SEED

REPLICAS_DIFFER = "min(nodes/*/step) == max(nodes/*/step) and differ(nodes/*/weights)"
"""Every rank has finished the same step and their weights are not all equal (the cheap clause
first: the weights are compared only when the steps agree)."""
REWIND_NS = 950_000_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    scenario = get_scenario("dp_training")
    path = tmp_path_factory.mktemp("demo") / "demo.ttr"
    report, world = record_run(scenario, scenario.resolve_config({"preset": "demo"}), DEMO_SEED, path)
    assert report["failure"]["signature"] == "divergence:dp_training.divergence"
    assert report["failure"]["node"] == "r3"
    flip = next(record for record in world.faults if record["id"] == "f2")
    assert (flip["kind"], flip["target"], flip["params"]["buffer"]) == ("corrupt", "r3", "grad")
    return path, {"report": report, "flip_ns": flip["t_start"]}


@pytest.mark.slow
def test_find_first_names_the_first_step_where_replicas_differ_and_the_rank(demo: tuple[Path, dict]) -> None:
    path, facts = demo
    with Session.open(path) as session:
        context = CommandContext(session=session)
        result = run_line(f"find-first --from 950 '{REPLICAS_DIFFER}' --go", context)
        assert result.found and result.strategy == "scan"  # `==` makes auto scan
        # the witnesses: r0 (every other replica agrees with it) and the odd one out, r3
        assert result.witnesses == ("nodes/r0/weights", "nodes/r3/weights")
        assert facts["flip_ns"] < result.t_ns < facts["report"]["failure"]["t_ns"]
        ranks = {name: state for name, state in session.world.nodes.items() if name.startswith("r")}
        assert {state["step"] for state in ranks.values()} == {106}  # all through step 105...
        assert {name: state["skipped_steps"] for name, state in ranks.items() if state["skipped_steps"]} == {
            "r3": 1
        }  # ...which r3 alone skipped
        # it is the first such state: the one before it does not hold
        session.goto_event(result.event - 1)
        assert not parse_predicate(REPLICAS_DIFFER).evaluate(world_tree(session.world)).holds
        assert result.replayed_events < facts["report"]["events"] // 10  # the search started at 950 ms
        assert session.goto(REWIND_NS).events < result.event
        if slow_size() == "full":
            assert find_first(session, REPLICAS_DIFFER).event == result.event  # nothing before 950 ms
