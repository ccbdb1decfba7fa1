"""What the user's command line (or Python call) allows a run whose worlds start external processes.

A world of the torch scenario runs the user's training script as rank processes: code. It may run
only when the user named it — on the command line (``timetravel torchrun SCRIPT``, ``--set
script=PATH``, ``--script PATH`` for a recording) or in Python (``timetravel.torch.simulate(fn)``).
A :class:`Launch` is that opt-in, as a value: the code the user named, which file runs in place of
the path a recording names, why a recording's code may not run here, where the processes'
output goes and what else they are told outside the world. It travels with the run (``Simulation(launch=...)``, a farm job's spec) or with the
Session that re-executes a recording; nothing read from a recording or a findings database ever
makes one (DESIGN.md, principle 7). Plain-data scenarios never look at it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

LAUNCH_CODE_MAX = 1024
"""Code names one launch may hold (a command line names a handful)."""


@dataclass(frozen=True)
class Launch:
    """See the module docstring. Immutable: each ``with_*`` returns a new one."""

    code: frozenset[str] = frozenset()
    """What the user named: resolved script paths, and ``function:module:qualname`` targets."""
    script_files: tuple[tuple[str, str], ...] = ()
    """A recording's script path (resolved) -> the file the user named with ``--script`` to run instead."""
    refusals: tuple[tuple[str, str], ...] = ()
    """A recording's script path (resolved) -> the one line any attempt to run it says instead."""
    output: Any = None
    """Where the processes' output goes (a text stream; None: standard output)."""
    process_settings: tuple[tuple[str, str], ...] = ()
    """Settings every process of this launch is told, outside the world (it runs as it would without
    them): where ``--against-real`` wants each rank's capture written."""

    def __post_init__(self) -> None:
        assert len(self.code) <= LAUNCH_CODE_MAX, f"a launch names at most {LAUNCH_CODE_MAX} pieces of code"

    def allows(self, code: str) -> bool:
        return code in self.code

    def file_for(self, recorded: str) -> str | None:
        return dict(self.script_files).get(recorded)

    def refusal_for(self, recorded: str) -> str | None:
        return dict(self.refusals).get(recorded)

    def with_code(self, *code: str) -> Launch:
        return replace(self, code=self.code | frozenset(code))

    def with_script_file(self, recorded: str, path: str) -> Launch:
        """Run ``path`` (named by the user, and so allowed) where a recording names ``recorded``."""
        files = tuple((key, value) for key, value in self.script_files if key != recorded)
        refusals = tuple((key, value) for key, value in self.refusals if key != recorded)
        return replace(
            self, code=self.code | {path}, script_files=(*files, (recorded, path)), refusals=refusals
        )

    def with_refusal(self, recorded: str, message: str) -> Launch:
        refusals = tuple((key, value) for key, value in self.refusals if key != recorded)
        return replace(self, refusals=(*refusals, (recorded, message)))

    def with_output(self, output: Any) -> Launch:
        return replace(self, output=output)

    def with_process_setting(self, key: str, value: str) -> Launch:
        kept = tuple((name, text) for name, text in self.process_settings if name != key)
        return replace(self, process_settings=(*kept, (key, value)))


NO_LAUNCH = Launch()
"""Nothing named: a run that needs no external code (every plain-data scenario)."""
