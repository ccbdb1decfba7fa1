"""Imports go down the layers of docs/architecture.md, with no circle anywhere, and each heavy
front-end library stays in its layer.

The rule keeps the kernel readable on its own and lets a farm worker or a headless replay import
timetravel without Textual, prompt_toolkit or Dask. A lower layer importing a higher one, or two
modules importing each other however far round (even lazily, inside a function, or under
``if TYPE_CHECKING``), is a design bug that this test names by file and line. The layers are read
from the picture in docs/architecture.md, so the page and the rule cannot drift apart.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "timetravel"

ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def documented_layers(page: str) -> dict[str, int]:
    """Package -> layer (0 = the lowest) from the first picture of docs/architecture.md: each line
    that starts with packages (``name/``) is a layer, top first; the packages on a line are peers."""
    picture = page.split("```", 2)[1]
    rows = [
        [word.rstrip("/") for word in itertools.takewhile(lambda word: word.endswith("/"), line.split())]
        for line in picture.splitlines()
        if line[:1].isalpha()
    ]
    return {name: len(rows) - 1 - index for index, row in enumerate(rows) for name in row}


LAYER = documented_layers(ARCHITECTURE.read_text())
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


# -- inside explore/: actions are functions over a Session, and Session imports none of them ---------

EXPLORE = PACKAGE / "explore"
ACTION_MODULES = (
    "branching",
    "compare",
    "divergence",
    "fanout",
    "minimize_run",
    "perfetto",
    "rerun",
    "search",
    "verify_replay",
)
"""The modules whose functions act on a Session (issue 14, part 4: they were Session's door methods)."""


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root`` (a package's ``__init__`` as the package)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def import_graph(root: Path, package: str) -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line}, over the modules under ``root`` only. Every import
    counts: at the top, inside a function (a lazy import) and under ``if TYPE_CHECKING``."""
    modules = module_names(root, package)
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = own_package.split(".")[: len(own_package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                submodules = [f"{base}.{alias.name}" for alias in node.names]
                targets = [target for target in submodules if target in modules] or [base]
            for target in targets:
                if target in modules and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def import_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a] (None: it is acyclic)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)) is not None:
            return found
    return None


def describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)) + f" -> {cycle[-1]}"


def test_no_module_in_explore_imports_a_module_that_imports_it_back() -> None:
    graph = import_graph(EXPLORE, "timetravel.explore")
    cycle = import_cycle(graph)
    assert cycle is None, f"import circle inside explore/: {describe(graph, cycle)}"


def test_session_imports_no_action_over_a_session() -> None:
    graph = import_graph(EXPLORE, "timetravel.explore")
    session_imports = graph["timetravel.explore.session"]
    actions = [f"timetravel.explore.{name}" for name in ACTION_MODULES]
    assert all(action in graph for action in actions), "an action module was renamed: update ACTION_MODULES"
    assert [a for a in actions if a in session_imports] == []
    takes_a_session = sorted(name for name, edges in graph.items() if "timetravel.explore.session" in edges)
    assert set(actions) <= set(takes_a_session)
    assert [name for name in takes_a_session if name in session_imports] == []


def test_the_cycle_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    """The check above is only worth its name if a lazy import counts: a circle through a function
    body (how Session's door methods imported the actions) is found and named with its line."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "session.py").write_text("def fork():\n    from pkg.branching import branch\n")
    (package / "branching.py").write_text("from pkg import session\n")
    (package / "plain.py").write_text("from pkg.session import fork\n")
    graph = import_graph(package, "pkg")
    assert graph["pkg.session"] == {"pkg.branching": 2} and graph["pkg.branching"] == {"pkg.session": 1}
    cycle = import_cycle(graph)
    assert cycle is not None and set(cycle) == {"pkg.session", "pkg.branching"}
    (package / "session.py").write_text("def fork():\n    return None\n")
    assert import_cycle(import_graph(package, "pkg")) is None


# -- everywhere: no circle, lazy imports included ----------------------------------------------------


def test_no_module_of_timetravel_imports_a_module_that_imports_it_back() -> None:
    graph = import_graph(PACKAGE, "timetravel")
    assert len(graph) > 300, "the graph lost most of the package: is module_names broken?"
    cycle = import_cycle(graph)
    assert cycle is None, f"import circle: {describe(graph, cycle)}"


def test_the_layers_come_from_the_architecture_page() -> None:
    assert LAYER["sim"] == 0 and LAYER["cli"] == max(LAYER.values())
    assert LAYER["torch"] == LAYER["scenarios"] and LAYER["fabric"] == 1
    packages = sorted(path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file())
    assert sorted(LAYER) == packages, "docs/architecture.md's picture and timetravel/'s packages differ"


# -- inside torch/: the rank child and the coordinator never import each other ------------------------

TORCH = PACKAGE / "torch"
SIDES = {"rank": ("world",), "world": ("rank",), "protocol": ("rank", "world")}
"""Each part of torch/ and the parts it may never import (the protocol is what both sides speak)."""


def side_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    problems = []
    for name, edges in sorted(graph.items()):
        side = name.split(".")[2] if name.count(".") >= 2 else ""
        for forbidden in SIDES.get(side, ()):
            prefix = f"timetravel.torch.{forbidden}"
            problems += [
                f"{name} (line {line}) imports {target}: torch/{side}/ never imports torch/{forbidden}/"
                for target, line in sorted(edges.items())
                if target == prefix or target.startswith(prefix + ".")
            ]
    return problems


def test_the_rank_side_and_the_coordinator_side_only_share_the_protocol() -> None:
    graph = import_graph(TORCH, "timetravel.torch")
    assert {
        "timetravel.torch.rank.main",
        "timetravel.torch.world.c10d",
        "timetravel.torch.protocol.wire",
    } <= set(graph)
    assert side_violations(graph) == []


def test_a_planted_lazy_import_across_the_sides_or_round_a_circle_fails(tmp_path: Path) -> None:
    """The checks above would pass vacuously if a lazy import did not count: plant one of each."""
    package = tmp_path / "torch"
    for part in ("", "rank", "world", "protocol"):
        (package / part).mkdir(exist_ok=True)
        (package / part / "__init__.py").write_text("")
    (package / "rank" / "main.py").write_text("def run():\n    from timetravel.torch.world import host\n")
    (package / "world" / "host.py").write_text("from timetravel.torch.protocol import wire\n")
    (package / "protocol" / "wire.py").write_text("def f():\n    from timetravel.torch.world.host import x\n")
    graph = import_graph(package, "timetravel.torch")
    assert side_violations(graph) == [
        "timetravel.torch.protocol.wire (line 2) imports timetravel.torch.world.host: "
        "torch/protocol/ never imports torch/world/",
        "timetravel.torch.rank.main (line 2) imports timetravel.torch.world.host: "
        "torch/rank/ never imports torch/world/",
    ]
    cycle = import_cycle(graph)
    assert cycle is not None and set(cycle) == {
        "timetravel.torch.world.host",
        "timetravel.torch.protocol.wire",
    }
