"""One table of failure kinds (sim/failure.py), checked where failures are made.

A detector that invents a kind (a typo, or a new one nobody added to the table, the TUI's legend, the
findings' buckets and the docs) fails here: statically, for every literal kind in the package's
code, and at run time, where ``make_failure`` refuses a kind the table does not have.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from timetravel.sim.failure import FAILURE_KINDS, make_failure

PACKAGE = Path(__file__).resolve().parent.parent / "timetravel"
KIND_ARGUMENT = {"fail": 0, "make_failure": 0, "rank_failed": 3}
"""Calls that make a failure, and the position of their kind argument."""


def literal_kinds() -> list[tuple[str, str]]:
    """(kind, file:line) of every string literal passed as a failure's kind in timetravel/."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            values = []
            if name in KIND_ARGUMENT and len(node.args) > KIND_ARGUMENT[name]:
                values.append(node.args[KIND_ARGUMENT[name]])
            values += [keyword.value for keyword in node.keywords if keyword.arg in ("kind", "failure_kind")]
            if name not in KIND_ARGUMENT and not any(k.arg == "failure_kind" for k in node.keywords):
                continue
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found.append((value.value, f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"))
    return found


def test_every_kind_the_code_makes_is_in_the_table() -> None:
    kinds = literal_kinds()
    assert len({kind for kind, _ in kinds}) >= 10, "the scan found too few failure sites: is it broken?"
    assert [(kind, where) for kind, where in kinds if kind not in FAILURE_KINDS] == []


def test_the_scan_sees_a_planted_unknown_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "timetravel"
    package.mkdir()
    (package / "detector.py").write_text('def on_end(ctx):\n    ctx.fail("nan_ish", "boom", "site")\n')
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    assert literal_kinds() == [("nan_ish", "timetravel/detector.py:2")]


def test_making_a_failure_of_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown failure kind 'nan_ish'"):
        make_failure("nan_ish", "r0", 0, "boom", "site")
    assert (
        make_failure("stuck", "r0", 5, "ran 120 s", "torch.rank.stuck")["signature"]
        == "stuck:torch.rank.stuck"
    )


def test_each_kind_says_what_it_means() -> None:
    assert all(isinstance(meaning, str) and len(meaning) > 20 for meaning in FAILURE_KINDS.values())
