"""Persistent, bounded command history under the user's state directory.

Typed commands are kept across sessions (Up, Ctrl-R) in ``$TIMETRAVEL_STATE_DIR/shell_history``,
else ``$XDG_STATE_HOME/timetravel/shell_history``, else ``~/.local/state/timetravel/shell_history``
(history is state, not configuration or cache, in the XDG sense). The file uses prompt_toolkit's
``FileHistory`` format (``+`` before each line of an entry), without its wall-clock timestamps.

Bounded: a session loads the newest ``HISTORY_ENTRIES_MAX`` entries, and when the file holds
``HISTORY_COMPACT_SLACK`` more than that, it is rewritten (atomically, through a temporary file
and a rename) with only the newest ones. So the file never exceeds
``HISTORY_ENTRIES_MAX + HISTORY_COMPACT_SLACK`` entries, and most commands cost one append.
A history that cannot be written (read-only home, full disk) never stops the shell: the
entries stay in memory and :attr:`BoundedFileHistory.write_error` says why.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from prompt_toolkit.history import History, InMemoryHistory

HISTORY_ENTRIES_MAX = 1_000
HISTORY_COMPACT_SLACK = 200
HISTORY_ENTRY_CHARS_MAX = 10_000
"""Longer entries are not stored (the parser rejects such lines anyway)."""
HISTORY_FILE_BYTES_MAX = 16 * 1024 * 1024
"""A history file larger than this is not read (it is not ours, or it is damaged)."""
HISTORY_FILE_NAME = "shell_history"
STATE_DIR_ENV = "TIMETRAVEL_STATE_DIR"


def state_dir() -> Path:
    """Where timetravel keeps per-user state (the shell's history)."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "timetravel"


def default_history_path() -> Path:
    return state_dir() / HISTORY_FILE_NAME


def session_history(persistent: bool = True) -> History:
    """The REPL's history: the bounded file under the state directory, or memory only."""
    return BoundedFileHistory(default_history_path()) if persistent else InMemoryHistory()


class BoundedFileHistory(History):
    """prompt_toolkit history in a file that never grows past its bound."""

    def __init__(self, path: Path, entries_max: int = HISTORY_ENTRIES_MAX) -> None:
        assert entries_max > 0
        self.path = path
        self.entries_max = entries_max
        self.write_error: str | None = None
        self._file_entries: int | None = None
        super().__init__()

    def load_history_strings(self) -> Iterable[str]:
        entries = read_entries(self.path)
        self._file_entries = len(entries)
        return list(reversed(entries[-self.entries_max :]))

    def store_string(self, string: str) -> None:
        if len(string) > HISTORY_ENTRY_CHARS_MAX:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if self._file_entries is None:
                self._file_entries = len(read_entries(self.path))
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(descriptor, "ab") as handle:
                handle.write(_encode(string))
            self._file_entries += 1
            if self._file_entries > self.entries_max + HISTORY_COMPACT_SLACK:
                self._compact()
        except OSError as error:
            self.write_error = f"history not saved to {self.path}: {error.strerror or error}"

    def _compact(self) -> None:
        entries = read_entries(self.path)[-self.entries_max :]
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(b"".join(_encode(entry) for entry in entries))
        os.replace(temporary, self.path)
        self._file_entries = len(entries)


def _encode(entry: str) -> bytes:
    lines = "".join(f"+{line}\n" for line in entry.split("\n"))
    return f"\n{lines}".encode("utf-8", errors="replace")


def read_entries(path: Path) -> list[str]:
    """The entries of a history file, oldest first ([] when it is missing, unreadable or too large)."""
    try:
        if path.stat().st_size > HISTORY_FILE_BYTES_MAX:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    entries: list[str] = []
    lines: list[str] = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        if line.startswith("+"):
            lines.append(line[1:])
        elif lines:
            entries.append("\n".join(lines))
            lines = []
    if lines:
        entries.append("\n".join(lines))
    return entries
