"""The user's own torch.distributed code as simulated ranks (issue 13).

Only this package imports torch, and only lazily: importing ``timetravel.torch`` (or its
``metrics`` module) works without torch installed.
"""

from __future__ import annotations

from timetravel.torch.metrics import metric

__all__ = ["metric"]
