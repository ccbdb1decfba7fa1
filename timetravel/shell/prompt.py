"""The prompt: where the cursor stands, so every line of a pasted session says where it ran.

``[main 950ms #4096]> `` — the branch, the cursor's time in the display unit and its event
number; ``FAIL`` is added once the cursor's world holds a failure. Batch mode echoes the same text
before each command, so a transcript reads the same whether it was typed or scripted.
"""

from __future__ import annotations

from dataclasses import dataclass

from prompt_toolkit.formatted_text import FormattedText

from timetravel.sim.timefmt import DISPLAY_UNIT_DEFAULT, format_time

PROMPT_STYLE = {
    "prompt.bracket": "",
    "prompt.branch": "ansicyan bold",
    "prompt.time": "ansiyellow bold",
    "prompt.event": "ansibrightblack",
    "prompt.failed": "ansired bold",
}


@dataclass(frozen=True)
class PromptState:
    """The cursor as the prompt shows it."""

    branch: str
    t_ns: int
    event: int
    failed: bool = False
    unit: str = DISPLAY_UNIT_DEFAULT


def prompt_text(state: PromptState) -> str:
    """The prompt as plain text (for batch echo and tests)."""
    return "".join(fragment[1] for fragment in prompt_fragments(state))


def prompt_fragments(state: PromptState) -> FormattedText:
    """The prompt with style classes (see ``PROMPT_STYLE``); ``[no recording]> `` with no branch."""
    if not state.branch:
        return FormattedText([("class:prompt.bracket", "[no recording]> ")])
    fragments = [
        ("class:prompt.bracket", "["),
        ("class:prompt.branch", state.branch),
        ("", " "),
        ("class:prompt.time", format_time(state.t_ns, state.unit)),
        ("", " "),
        ("class:prompt.event", f"#{state.event}"),
    ]
    if state.failed:
        fragments += [("", " "), ("class:prompt.failed", "FAIL")]
    fragments.append(("class:prompt.bracket", "]> "))
    return FormattedText(fragments)
