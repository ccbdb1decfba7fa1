"""docs/tui.md: its key table is the bindings, and the screenshots it shows exist."""

from __future__ import annotations

import re

from tests.conftest import REPOSITORY_ROOT
from timetravel.tui.app import KEYMAP_SCOPES
from timetravel.tui.keymap import keymap_markdown, keymap_rows

DOC = REPOSITORY_ROOT / "docs" / "tui.md"


def test_the_key_table_in_the_doc_is_the_bindings() -> None:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("<!-- keymap:start")
    start = text.index("\n", start) + 1
    end = text.index("<!-- keymap:end -->")
    assert text[start:end].strip() == keymap_markdown(keymap_rows(KEYMAP_SCOPES))


def test_every_screenshot_the_doc_shows_is_an_svg_textual_exported() -> None:
    text = DOC.read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(images) >= 4
    for image in images:
        path = DOC.parent / image
        assert path.suffix == ".svg" and path.exists(), image
        assert path.read_text(encoding="utf-8").lstrip().startswith("<svg"), image
