"""Issue 15's acceptance on the dp_training demo: ``explain`` names f2, r3, the flipped element (index,
bit, old and new value), r3's lone skip and the later divergence check, in about a dozen lines; the
diff of a branch without f2 names the fault in one line and the flipped element, and compare agrees.

The demo recording is 63,738 events, so these tests are marked slow (CI runs them).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from timetravel.explore import Session
from timetravel.explore.commands import CommandContext, render_text, run_line
from timetravel.explore.explain_results import LINK_DETECTOR, LINK_FAULT, LINK_ROOT, LINK_WRITE
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training.params import DEMO_SEED

LINES_MAX = 20


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    scenario = get_scenario("dp_training")
    path = tmp_path_factory.mktemp("demo") / "demo.ttr"
    report, world = record_run(scenario, scenario.resolve_config({"preset": "demo"}), DEMO_SEED, path)
    flip = next(record for record in world.faults if record["id"] == "f2")
    assert (flip["kind"], flip["target"], report["failure"]["node"]) == ("corrupt", "r3", "r3")
    flipped = [entry[-1] for entry in world.log if "flipped bit" in str(entry[-1]) and "f2" in str(entry[-1])]
    (message,) = flipped
    bit, element = (int(n) for n in re.findall(r"bit (\d+) of element (\d+)", message)[0])
    return path, {"flip": flip, "bit": bit, "element": element}


@pytest.mark.slow
def test_explain_names_the_fault_the_rank_the_element_the_skip_and_the_check(demo: Any) -> None:
    path, facts = demo
    with Session.open(path) as session:
        result = run_line("explain", CommandContext(session=session))
    roles = [link.role for link in result.links]
    assert roles[0] == LINK_DETECTOR and roles[-1] == LINK_ROOT and result.complete
    detector = result.links[0]
    assert detector.node == "monitor" and "divergence" in detector.what  # the later divergence check
    root = result.links[-1]
    assert root.what.startswith("f2 corrupt r3 buffer=grad")
    (fault,) = [link for link in result.links if link.role == LINK_FAULT]
    assert (fault.node, fault.t_ns) == ("r3", facts["flip"]["t_start"])
    (flip,) = fault.changes
    assert flip.path == "nodes/r3/grad_pending"
    assert f"[{facts['element']}] 0.0 -> " in flip.summary and f"(bit {facts['bit']})" in flip.summary
    writes = [link for link in result.links if link.role == LINK_WRITE]
    skip = next(link for link in writes if "skipped_steps" in link.what)
    assert skip.node == "r3" and "alone" in skip.what
    assert {change.path: change.summary for change in skip.changes}["nodes/r3/skipped_steps"].startswith(
        "0 -> 1"
    )
    assert "skip_local = True (its 15 peers: False)" in skip.because
    # the counterfactual: with its peers' skip_local r3 would have applied the step
    assert skip.otherwise.startswith(
        "with its peers' skip_local (False) it would have written skipped_steps 0"
    )
    text = render_text(result)
    assert len(text) <= LINES_MAX


@pytest.mark.slow
def test_diff_without_f2_names_it_once_and_the_flipped_element(demo: Any, tmp_path: Path) -> None:
    source, facts = demo
    path = tmp_path / "demo.ttr"
    path.write_bytes(source.read_bytes())
    with Session.open(path) as session:
        context = CommandContext(session=session)
        run_line("branch --at 950 --drop-fault f2", context)
        context.reopen()
        diff = run_line("diff main b1", context)
        compare = run_line("compare main b1", context)
    by_path = {entry.path: entry for entry in diff.paths}
    assert by_path["faults/f2"].change == "removed" and not [p for p in by_path if p.startswith("faults/f3")]
    assert f"[{facts['element']}] bit {facts['bit']}" in by_path["nodes/r3/grad_pending"].summary
    assert len(diff.paths) <= 10 and diff.omitted == 0
    assert compare.diff is not None and compare.diff.to_data() == diff.to_data()
    assert [row.name for row in compare.metric_rows][:1] == ["loss"] and "metrics" in compare.to_data()
