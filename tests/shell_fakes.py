"""Test doubles for the shell: a spec table shaped like the explore layer's, a source, an engine.

The specs mirror ``timetravel.explore.commands.spec`` (name, kind, help, required, rest; option
name, kind, help, repeat), which the shell reads only structurally. The engine understands a few
commands so the REPL and batch runner can be driven end to end without a recording.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from timetravel.shell.completion import Candidate, Vocabulary
from timetravel.shell.engine import ExitShell
from timetravel.shell.prompt import PromptState
from timetravel.sim.timefmt import parse_time


@dataclass(frozen=True)
class Argument:
    name: str
    kind: str
    help: str
    required: bool = True
    rest: bool = False


@dataclass(frozen=True)
class Option:
    name: str
    kind: str | None
    help: str
    repeat: bool = False


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    arguments: tuple[Argument, ...] = ()
    options: tuple[Option, ...] = ()
    aliases: tuple[str, ...] = field(default=())

    @property
    def usage(self) -> str:
        words = [self.name]
        words += [
            argument.name.upper() if argument.required else f"[{argument.name.upper()}]"
            for argument in self.arguments
        ]
        words += [f"[{option.name}]" for option in self.options]
        return " ".join(words)


COMMANDS = (
    Command(
        "goto",
        "move the cursor",
        (Argument("time", "time", "950, 1.5s or #N"),),
        (Option("--branch", "branch", "switch first"),),
    ),
    Command("step", "run N events", (Argument("count", "count", "how many", required=False),)),
    Command(
        "print",
        "the state under a path",
        (Argument("path", "path", "a state path", required=False),),
        (Option("--depth", "count", "levels"),),
    ),
    Command(
        "events",
        "the event log",
        (),
        (Option("--node", "node", "only this node"), Option("--after", None, "after the cursor")),
    ),
    Command(
        "find-first",
        "first moment a predicate holds",
        (Argument("predicate", "predicate", "e.g. nonfinite(nodes/*/weights)", rest=True),),
        (Option("--from", "time", "search from"), Option("--go", None, "move there")),
    ),
    Command(
        "branch",
        "run an alternate future",
        (),
        (
            Option("--at", "time", "where the future starts"),
            Option("--from", "branch", "the branch to fork"),
            Option("--branch-seed", "int", "a new branch key"),
            Option("--drop-fault", "fault", "remove a fault", repeat=True),
            Option("--set", "setting", "change a config key", repeat=True),
            Option("--name", "name", "name the branch"),
        ),
    ),
    Command(
        "compare",
        "two branches side by side",
        (Argument("a", "branch", "first"), Argument("b", "branch", "second")),
    ),
    Command("minimize", "shrink the failure", (), (Option("--out", "file", "write the repro here"),)),
    Command(
        "help",
        "the commands",
        (Argument("command", "command", "a command name", required=False),),
        aliases=("?",),
    ),
    Command("quit", "leave the shell"),
)
VOCABULARY = Vocabulary(
    {command.name: command for command in COMMANDS},
    {"?": "help"},
    ("nonfinite", "differ", "changed", "exists", "len", "max"),
)

TREE: dict[str, Any] = {
    "nodes": {f"rank{index}": {"step": 40, "weights": [0.5, 0.25], "loss": 1.5} for index in range(14)},
    "faults": [{"id": "f1"}],
    "metrics": {"loss": []},
    "t_ns": 0,
}


def tree_paths(prefix: str) -> list[str]:
    """Children of ``prefix``'s directory (``*`` visits every key), like explore's path completion."""
    head, _, _ = prefix.rpartition("/")
    parents: list[Any] = [TREE]
    for segment in head.split("/") if head else []:
        children: list[Any] = []
        for parent in parents:
            if isinstance(parent, dict):
                children += (
                    list(parent.values())
                    if segment == "*"
                    else [parent[segment]]
                    if segment in parent
                    else []
                )
            elif isinstance(parent, list) and segment.isdigit() and int(segment) < len(parent):
                children.append(parent[int(segment)])
        parents = children
    names: list[str] = []
    for parent in parents:
        keys = (
            list(parent)
            if isinstance(parent, dict)
            else [str(i) for i in range(len(parent))]
            if isinstance(parent, list)
            else []
        )
        for key in keys:
            path = f"{head}/{key}" if head else key
            if path not in names:
                names.append(path)
    return names


class FakeSource:
    def times(self) -> Sequence[Candidate]:
        return (
            Candidate("0ms", "start"),
            Candidate("500ms", "snapshot"),
            Candidate("950ms", "snapshot"),
            Candidate("1000ms", "failure: nan on rank3"),
        )

    def nodes(self) -> Sequence[Candidate]:
        return tuple(Candidate(name, "worker") for name in TREE["nodes"])

    def branches(self) -> Sequence[Candidate]:
        return (Candidate("main", "FAIL nan"), Candidate("b1", "pass"), Candidate("fixed", "pass"))

    def faults(self) -> Sequence[Candidate]:
        return (Candidate("f1", "bitflip rank3"), Candidate("f3", "drop rank2"))

    def settings(self) -> Sequence[Candidate]:
        return (
            Candidate("bug=none", "fixed choice"),
            Candidate("bug=flip", "fixed choice"),
            Candidate("steps=", "int"),
        )

    def paths(self, prefix: str) -> Sequence[str]:
        return tree_paths(prefix)


class FakeUserError(ValueError):
    pass


@dataclass(frozen=True)
class EchoResult:
    """A result type with no renderer: shown through its to_data()."""

    words: tuple[str, ...]

    def to_data(self) -> dict[str, Any]:
        return {"words": list(self.words)}


class FakeEngine:
    """Understands ``goto T``, ``fail``, ``boom``, ``quit``, ``echo ...``; records what ran."""

    display_unit = "ms"
    user_errors: tuple[type[BaseException], ...] = (FakeUserError,)
    vocabulary = VOCABULARY

    def __init__(self) -> None:
        self.t_ns = 0
        self.event = 0
        self.branch = "main"
        self.ran: list[str] = []

    def execute(self, text: str) -> object:
        self.ran.append(text)
        words = text.split()
        if words[0] == "goto":
            self.t_ns = parse_time(words[1], self.display_unit)
            self.event = self.t_ns // 1_000_000
            return f"at {words[1]}"
        if words[0] == "fail":
            raise FakeUserError("goto: 'soon': not a time (examples: 950, 950ms)\nsecond line never shown")
        if words[0] == "boom":
            raise RuntimeError("the engine broke")
        if words[0] == "quit":
            raise ExitShell()
        if words[0] == "echo":
            return EchoResult(tuple(words[1:]))
        raise FakeUserError(f"unknown command {words[0]!r}")

    def prompt_state(self) -> PromptState:
        return PromptState(self.branch, self.t_ns, self.event, failed=self.t_ns >= 1_000_000_000)

    def completion_source(self) -> FakeSource:
        return FakeSource()
