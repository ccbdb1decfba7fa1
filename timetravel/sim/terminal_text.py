"""The one sanitising function for text from a recording or a database on its way to a terminal.

A recording or a findings database can come from anyone, and any string in it (a branch name, a
failure message, a node name, a signature) can hold terminal control sequences: ``\\x1b]0;...\\x07``
retitles the terminal, ``\\x1b[2J`` clears it, a bidirectional override reorders what the user
reads. Every front end shows such text through :func:`terminal_safe`: the plain rendering of every
command result (explore/commands/render.py), the CLI's own lines and one-line errors, the shell's
consoles (a render hook) and the TUI's widgets (tui/safe_lines.py). Each control character is
shown escaped (``\\x1b``, ``\\u202e``), so the user sees that it is there and nothing acts on it.
"""

from __future__ import annotations

import re

CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""C0 controls but the tab, DEL, C1 controls, line and paragraph separators, and the bidirectional
marks, embeddings, overrides and isolates."""


def terminal_safe(text: str) -> str:
    """``text`` with every control character escaped (a newline too: one line stays one line)."""
    if text.isascii() and text.isprintable():
        return text
    return CONTROL.sub(_escaped, text)


def terminal_safe_lines(text: str) -> str:
    """``terminal_safe`` for text of several lines: its newlines are kept, everything else escaped."""
    return "\n".join(terminal_safe(line) for line in text.split("\n"))


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
