"""The user's own PyTorch code under the simulator (docs/torch.md).

``timetravel torchrun SCRIPT`` and the scenario ``torch`` run a torch.distributed script as rank
processes; :func:`simulate` runs a Python function the same way; :func:`metric` lets a script report a
metric (a no-op outside the simulator). Only this package imports torch, and only lazily: importing
``timetravel.torch`` works without torch installed.
"""

from __future__ import annotations

from timetravel.torch.api import TorchRun, simulate
from timetravel.torch.metrics import metric

__all__ = ["TorchRun", "metric", "simulate"]
