"""Imports go down the layers of DESIGN.md, and each heavy front-end library stays in its layer.

The rule keeps the kernel readable on its own and lets a farm worker or a headless replay import
timetravel without Textual, prompt_toolkit or Dask. A lower layer importing a higher one (even
lazily, inside a function) is a design bug that this test names by file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "timetravel"

LAYER = {
    "sim": 0,
    "fabric": 1,
    "scenarios": 2,
    "torch": 2,
    "snapshot": 3,
    "recording": 4,
    "determinism": 5,
    "explore": 5,
    "farm": 6,
    "tui": 6,
    "shell": 6,
    "bench": 7,
    "cli": 7,
}
PEERS_THAT_MUST_NOT_MEET = {"farm", "tui", "shell"}
LIBRARY_HOME = {
    "textual": "tui",
    "prompt_toolkit": "shell",
    "dask": "farm",
    "distributed": "farm",
    "torch": "torch",
}
TOP_LEVEL_MODULES = {"__init__", "__main__"}


def package_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imported_modules(tree: ast.AST) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
    return found


def violations() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        home = package_of(path)
        if home in TOP_LEVEL_MODULES:
            continue
        assert home in LAYER, f"{path}: package {home!r} has no layer in this test (add it where it belongs)"
        for module, line in imported_modules(ast.parse(path.read_text(), filename=str(path))):
            parts = module.split(".")
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            library = LIBRARY_HOME.get(parts[0])
            if library is not None and home != library:
                problems.append(f"{where}: {home}/ imports {module}, which only {library}/ may import")
            if parts[0] != "timetravel" or len(parts) < 2 or parts[1] in TOP_LEVEL_MODULES:
                continue
            target = parts[1]
            if target not in LAYER:
                continue
            if LAYER[target] > LAYER[home]:
                problems.append(
                    f"{where}: {home}/ (layer {LAYER[home]}) imports {module} (layer {LAYER[target]})"
                )
            elif target != home and {target, home} <= PEERS_THAT_MUST_NOT_MEET:
                problems.append(f"{where}: front end {home}/ imports front end {target}/")
    return problems


def test_imports_only_go_down_the_layers() -> None:
    assert violations() == []
