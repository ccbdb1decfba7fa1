"""Each widget keeps its stylesheet in a ``.tcss`` file beside its module; this reads it.

Reading the file into ``DEFAULT_CSS`` (rather than listing every file in the App's ``CSS_PATH``)
means a widget is styled wherever it is mounted, including in a test's bare App. The files ship
as package data (``**/*.tcss`` in pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path


def css_beside(module_file: str) -> str:
    """The ``.tcss`` file named like the module (``timeline.py`` -> ``timeline.tcss``)."""
    return Path(module_file).with_suffix(".tcss").read_text(encoding="utf-8")


def component_classes(widget: str, *parts: str) -> set[str]:
    """A widget's ``COMPONENT_CLASSES``: ``widget--part`` for each part (``timeline--cursor``)."""
    return {f"{widget}--{part}" for part in parts}
