"""Test doubles for the shell: a value source over a small world tree, and a toy engine.

Completion uses the real command language's specs (plus the shell's own); the source stands in
for an open recording. The toy engine understands a few commands so the REPL and the batch
runner can be driven end to end without a recording.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from timetravel.shell.commands import SHELL_SPECS
from timetravel.shell.completion import language_vocabulary
from timetravel.shell.engine import ExitShell
from timetravel.shell.prompt import PromptState
from timetravel.sim.timefmt import parse_time

VOCABULARY = language_vocabulary(SHELL_SPECS)


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


VALUES: dict[str, list[str]] = {
    "time": ["0ms", "500ms", "950ms", "1000ms"],
    "node": list(TREE["nodes"]),
    "branch": ["main", "b1", "fixed"],
    "fault": ["f1", "f3"],
    "setting": ["bug=none", "bug=flip", "steps="],
}
NOTES: dict[str, dict[str, str]] = {
    "time": {"0ms": "start", "500ms": "snapshot", "950ms": "snapshot", "1000ms": "failure: nan on rank3"},
    "branch": {"main": "FAIL nan", "b1": "pass", "fixed": "pass"},
    "fault": {"f1": "bitflip rank3", "f3": "drop rank2"},
}


class FakeSource:
    """The language's ValueSource (values of a kind) with notes, over the tree above."""

    def values(self, kind: str, prefix: str) -> list[str]:
        if kind == "path":
            return tree_paths(prefix)
        return list(VALUES.get(kind, []))

    def notes(self, kind: str) -> dict[str, str]:
        return NOTES.get(kind, {})


class FakeUserError(ValueError):
    pass


class FakeMismatch(Exception):
    pass


@dataclass(frozen=True)
class EchoResult:
    """A result type with no renderer: shown through its to_data()."""

    words: tuple[str, ...]

    def to_data(self) -> dict[str, Any]:
        return {"words": list(self.words)}


class FakeEngine:
    """Understands ``goto T``, ``fail``, ``boom``, ``diverge``, ``quit``, ``echo ...``; records what ran."""

    display_unit = "ms"
    user_errors: tuple[type[BaseException], ...] = (FakeUserError,)
    mismatch_errors: tuple[type[BaseException], ...] = (FakeMismatch,)
    vocabulary = VOCABULARY

    def long_running(self, text: str) -> bool:
        """``slow`` and ``giveup`` stand for commands that run simulations; ``seek`` for one that does not."""
        return text.split()[0] in ("slow", "giveup")

    def __init__(self) -> None:
        self.t_ns = 0
        self.event = 0
        self.branch = "main"
        self.ran: list[str] = []
        self.progress: Callable[[Any], None] = lambda report: None
        self.should_stop: Callable[[], bool] = lambda: False
        """The command context's hooks (a test wires them to a CommandMonitor)."""

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
        if words[0] == "diverge":
            raise FakeMismatch("replay differs at event #7: chain batch 0 [cause: determinism_bug]")
        if words[0] == "quit":
            raise ExitShell()
        if words[0] == "echo":
            return EchoResult(tuple(words[1:]))
        if words[0] in ("slow", "seek", "giveup"):
            return self._work(words[0], int(words[1]), int(words[2]) if len(words) > 2 else None)
        raise FakeUserError(f"unknown command {words[0]!r}")

    def _work(self, name: str, units: int, ctrl_c_after: int | None) -> str:
        """``units`` units of work with a progress report each and a stop check between them; the
        process sends itself SIGINT (a real Ctrl-C) after ``ctrl_c_after`` units."""
        for unit in range(units):
            if self.should_stop():
                if name == "giveup":  # work that has no result to give when stopped early
                    raise FakeUserError(f"giveup: stopped after {unit} of {units} (no result)")
                return f"{name} stopped after {unit} of {units}"
            self.progress(f"{name} unit {unit + 1} of {units}")
            if unit + 1 == ctrl_c_after:
                signal.raise_signal(signal.SIGINT)
        return f"{name} done: {units} units"

    def prompt_state(self) -> PromptState:
        return PromptState(self.branch, self.t_ns, self.event, failed=self.t_ns >= 1_000_000_000)

    def completion_source(self) -> FakeSource:
        return FakeSource()
