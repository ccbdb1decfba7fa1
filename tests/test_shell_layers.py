"""Layering: only the shell imports prompt_toolkit, and the shell imports no front end above it."""

from __future__ import annotations

import ast
from pathlib import Path

import timetravel
import timetravel.shell

PACKAGE = Path(timetravel.__file__).parent


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_only_the_shell_imports_prompt_toolkit() -> None:
    importers = {
        path.relative_to(PACKAGE).parts[0]
        for path in PACKAGE.rglob("*.py")
        if any(module.split(".")[0] == "prompt_toolkit" for module in imported_modules(path))
    }
    assert importers == {"shell"}


def test_the_shell_imports_no_layer_above_it_and_no_other_front_end() -> None:
    forbidden = ("timetravel.cli", "timetravel.tui", "timetravel.farm", "textual")
    for path in (PACKAGE / "shell").rglob("*.py"):
        for module in imported_modules(path):
            assert not module.startswith(forbidden), f"{path.name} imports {module}"


def test_the_public_names_exist() -> None:
    for name in timetravel.shell.__all__:
        assert hasattr(timetravel.shell, name), name
