"""The user's own PyTorch code under the simulator (docs/torch.md).

``timetravel torchrun SCRIPT`` and the scenario ``torch`` run a torch.distributed script as rank
processes; :func:`simulate` runs a Python function the same way. Importing this package does not import
torch: only the rank processes and the modules they use do.
"""

from __future__ import annotations

from timetravel.torch.api import TorchRun, simulate

__all__ = ["TorchRun", "simulate"]
