"""prompt_toolkit's face of :mod:`timetravel.shell.completion`.

The matched characters are highlighted with prompt_toolkit's own ``fuzzymatch`` style classes, so
the menu looks like its ``FuzzyCompleter``. The source is asked afresh on every keystroke (through
a callable), because the cursor, the branches and the world change as commands run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import StyleAndTextTuples

from timetravel.explore.commands import ValueSource
from timetravel.shell import completion
from timetravel.shell.completion import Vocabulary


class ShellCompleter(Completer):
    """Fuzzy completion of commands, options, times, nodes, state paths, branches, faults, settings."""

    def __init__(self, vocabulary: Vocabulary, source: Callable[[], ValueSource]) -> None:
        self.vocabulary = vocabulary
        self.source = source

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        found = completion.complete(document.text_before_cursor, self.vocabulary, self.source())
        for item in found:
            yield Completion(
                item.text,
                start_position=-item.replace_length,
                display=_highlight(item.display, item.positions),
                display_meta=item.meta,
            )


def _highlight(text: str, positions: tuple[int, ...]) -> StyleAndTextTuples:
    if not positions:
        return [("", text)]
    matched = set(positions)
    return [
        ("class:fuzzymatch.inside.character" if index in matched else "class:fuzzymatch.outside", character)
        for index, character in enumerate(text)
    ]
