"""Rendering results for the shell: rich tables, trees and plots (see :mod:`.registry`).

Importing this package registers the renderers of every built-in result type.
"""

from timetravel.shell.render import compare as _compare  # noqa: F401  (registers the renderers)
from timetravel.shell.render import explain as _explain  # noqa: F401  (registers the renderers)
from timetravel.shell.render import results as _results  # noqa: F401  (registers the renderers)
from timetravel.shell.render.registry import RenderContext, registered_types, render, renderer_for, renders

__all__ = ["RenderContext", "registered_types", "render", "renderer_for", "renders"]
