"""explain and origin (issue 15): a causal chain from a failure back to its fault records, derived by
re-executing events with their reads noted, on a scenario whose code says nothing about causes.

The needle scenario's bug needs two faults together (a worker restarted and one of its acks dropped);
the chain must end in exactly those two fault records. Diffs of a branch that drops one fault name it
in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from timetravel.cli import main as cli_main
from timetravel.explore import Session
from timetravel.explore.commands import CommandContext, CommandError, render_text, run_line
from timetravel.explore.explain import explain
from timetravel.explore.explain_results import LINK_DETECTOR, LINK_FAULT, LINK_ROOT
from timetravel.explore.provenance import origin, trace_event
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario

NEEDLE_SETTINGS = {"decoys": 5, "rounds": 12, "workers": 4}
MS = 1_000_000


@pytest.fixture(scope="module")
def needle_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    scenario = get_scenario("needle")
    path = tmp_path_factory.mktemp("needle") / "needle.ttr"
    report, world = record_run(scenario, scenario.resolve_config(NEEDLE_SETTINGS), 0, path)
    assert report["failure"]["node"] == "w1"
    culprits = {record["kind"]: record for record in world.faults if record["target"] == "w1"}
    return path, culprits


@pytest.fixture
def needle(needle_source: Any, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    source, culprits = needle_source
    path = tmp_path / "needle.ttr"
    shutil.copy(source, path)
    return path, culprits


def test_explain_ends_in_the_two_fault_records_the_bug_needs(needle: Any) -> None:
    path, culprits = needle
    with Session.open(path) as session:
        result = explain(session)
        assert session.position.events == 0  # the cursor did not move
        last_event = session.end.events
    assert result.complete and result.failure is not None
    detector = result.links[0]
    assert detector.role == LINK_DETECTOR and detector.event == last_event  # the failing event
    roots = [link for link in result.links if link.role == LINK_ROOT]
    assert sorted(link.what.split()[0] for link in roots) == sorted(
        [culprits["restart"]["id"], culprits["drop"]["id"]]
    )
    faults = [link for link in result.links if link.role == LINK_FAULT]
    assert {link.t_ns for link in faults} == {culprits["restart"]["t_start"], culprits["drop"]["t_start"]}
    for link in result.links:  # every event link says when, where and what kind
        if link.event is not None:
            assert link.t_ns is not None and link.node and link.kind
    # the fault links show the state the fault changed
    changed = {change.path for link in faults for change in link.changes}
    assert changed == {"nodes/w1/applied_round", "nodes/w1/drop_until"}
    text = render_text(result)
    assert text[0].startswith("explain main: FAIL assertion:needle.total on w1")
    assert len(text) <= 14


def test_origin_names_the_event_that_wrote_a_value_and_what_it_read(needle: Any) -> None:
    path, culprits = needle
    drop = culprits["drop"]
    with Session.open(path) as session:
        found = origin(session, "nodes/w1/drop_until", at=f"{(drop['t_start'] + 1) / MS}ms")
        assert found.event is not None and (found.t_ns, found.node, found.kind) == (
            drop["t_start"],
            "w1",
            "fault",
        )
        assert [change.path for change in found.changes] == ["nodes/w1/drop_until"]
        assert found.caused_by is None  # a fault event is scheduled when the world is built
        trace = trace_event(session, found.event)
        assert ("w1", "drop_until") not in trace.reads or trace.event.kind == "fault"
        before = origin(session, "nodes/w1/drop_until", at=f"{(drop['t_start'] - 1) / MS}ms")
        assert before.event is None  # as built
        context = CommandContext(session=session)
        result = run_line("origin nodes/w1/applied_round --go", context)
        assert result.event is None and session.position.events == 0  # at the cursor (0): as built
        session.goto("end")
        result = run_line("origin nodes/w1/applied_round --go", context)
        assert result.event is not None and session.position.events == result.event  # --go moved there
        with pytest.raises(CommandError, match="no value at nodes/w1/nothing"):
            run_line("origin nodes/w1/nothing", context)


def test_a_message_is_traced_to_the_event_that_sent_it(needle: Any) -> None:
    path, _ = needle
    with Session.open(path) as session:
        result = explain(session)
        detector, message = result.links[0], result.links[1]
        assert detector.node == "leader" and message.node == "w1" and detector.event is not None
        delivered = session.event(detector.event)
        assert delivered is not None and message.what.startswith(f"sent {delivered.kind} ")


def test_cli_explain_and_origin(needle: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path, _culprits = needle
    assert cli_main(["explain", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["branch", "failure", "links", "traced_events", "complete", "site"]
    assert data["site"] is None  # only a torch run has a rank, a step, a batch and modules
    assert all(
        {"role", "event", "t_ns", "node", "kind", "what", "changes"} <= set(link) for link in data["links"]
    )
    assert cli_main(["origin", str(path), "nodes/w1/drop_until"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nodes/w1/drop_until on main at ") and "fault -> w1" in out
    assert cli_main(["origin", str(path), "nodes/w9/x"]) == 2
    assert capsys.readouterr().err.strip() == "timetravel: error: no value at nodes/w9/x on main at event #66"
    assert cli_main(["explain", str(path), "--branch", "b9"]) == 2
    assert "no branch 'b9'" in capsys.readouterr().err


def test_a_passing_branch_has_nothing_to_explain(needle: Any) -> None:
    path, culprits = needle
    with Session.open(path) as session:
        context = CommandContext(session=session)
        run_line(f"branch --at 1 --drop-fault {culprits['restart']['id']}", context)
        context.reopen()
        result = run_line("explain b1", context)
        assert result.failure is None and render_text(result) == ["b1: pass: nothing to explain"]


def test_a_dropped_fault_is_one_line_of_diff_and_compare_agrees(needle: Any) -> None:
    """Issue 15: dropping f2 made every later fault record look changed."""
    path, culprits = needle
    dropped = culprits["drop"]["id"]
    with Session.open(path) as session:
        context = CommandContext(session=session)
        run_line(f"branch --at 1 --drop-fault {dropped}", context)
        context.reopen()
        diff = run_line("diff main b1", context)
        compare = run_line("compare main b1", context)
    fault_paths = [entry for entry in diff.paths if entry.path.startswith("faults/")]
    assert [(entry.path, entry.change) for entry in fault_paths] == [(f"faults/{dropped}", "removed")]
    assert not [
        entry for entry in diff.paths if entry.path.startswith("queue/") and entry.change == "changed"
    ]
    assert compare.diff is not None and compare.diff.to_data() == diff.to_data()
    assert diff.moment == "first divergence"
    text = render_text(compare)
    assert f"({diff.moment}): {len(diff.paths) + diff.omitted} paths differ" in text[3]


def test_a_failing_branch_is_explained_across_its_fork(needle: Any) -> None:
    path, culprits = needle
    decoy = next(f"f{n}" for n in range(1, 10) if f"f{n}" not in {c["id"] for c in culprits.values()})
    with Session.open(path) as session:
        context = CommandContext(session=session)
        run_line(f"branch --at 1 --drop-fault {decoy} --name without_decoy", context)
        context.reopen()
        result = run_line("explain without_decoy", context)
    assert result.branch == "without_decoy" and result.failure is not None
    roots = sorted(link.what.split()[0] for link in result.links if link.role == LINK_ROOT)
    assert roots == sorted([culprits["restart"]["id"], culprits["drop"]["id"]])
