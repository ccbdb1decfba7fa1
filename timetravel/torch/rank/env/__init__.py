"""The environment inside a rank process: logical clocks, seeded entropy, CUDA on CPU, DataLoader
workers, torch.compile and metrics capture — each an ``install_*`` function that returns an
:class:`~timetravel.torch.rank.env.patching.Installation`, and :func:`install_all` for all of them.

Nothing here imports torch at import time; the installers import it when called (inside a rank).
docs/torch.md ("The rank environment") says what is simulated, what is not and why.
"""

from __future__ import annotations

from timetravel.torch.rank.env.clock import WALL_EPOCH_NS, ClockError, RankClock
from timetravel.torch.rank.env.cuda import REFUSED_MODULES, install_cuda
from timetravel.torch.rank.env.cuda_api import DeviceSpec, Unsupported
from timetravel.torch.rank.env.entropy import install_entropy, preserving_entropy_across_fork
from timetravel.torch.rank.env.files import install_file_watch
from timetravel.torch.rank.env.install import RankEnvironment, install_all, install_torch_settings, preload
from timetravel.torch.rank.env.loading import install_compile, install_dataloader
from timetravel.torch.rank.env.metrics_capture import install_metrics
from timetravel.torch.rank.env.patching import Installation
from timetravel.torch.rank.env.virtual_time import install_time, real_monotonic_ns, real_time_ns

__all__ = [
    "REFUSED_MODULES",
    "WALL_EPOCH_NS",
    "ClockError",
    "DeviceSpec",
    "Installation",
    "RankClock",
    "RankEnvironment",
    "Unsupported",
    "install_all",
    "install_compile",
    "install_cuda",
    "install_dataloader",
    "install_entropy",
    "install_file_watch",
    "install_metrics",
    "install_time",
    "install_torch_settings",
    "preload",
    "preserving_entropy_across_fork",
    "real_monotonic_ns",
    "real_time_ns",
]
