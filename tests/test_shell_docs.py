"""docs/shell.md stays true: its recording and tour script give the cursor positions and the
findings the page shows (the prompts carry every seek's time and event number)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from timetravel.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs"
TOUR = DOCS / "examples" / "shell-tour.tt"
PROMPT = re.compile(r"^\[main [^\]]*\]> .*$", re.MULTILINE)


def test_the_tour_prints_the_prompts_and_findings_the_page_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["run", "needle", "--set", "decoys=6", "--record", "--snapshot-every", "64"]) == 1
    capsys.readouterr()
    assert main(["shell", "recordings/needle-0.ttr", "-x", str(TOUR)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    page = (DOCS / "shell.md").read_text(encoding="utf-8")
    prompts = PROMPT.findall(out)
    assert len(prompts) == 23
    position = 0
    for prompt in prompts:  # every prompt of the tour, in order, on the page
        position = page.index(prompt, position) + len(prompt)
    for finding in (
        "nodes/w3/total   230     changed",
        "FAIL assertion on w3 at 77.022955ms: w3 reports total 230 after round 19, expected 210",
        "f4  drop     w3      76ms          76.5ms        kind=ack",
        "━━ main  19 points, last finite 23102",
    ):
        assert finding in out and finding in page, finding
