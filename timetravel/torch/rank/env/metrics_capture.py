"""Metrics capture inside a rank: what the script logs reaches the World's metrics.

``install_metrics(sink)`` sends to ``sink(name, value, step)``:

* :func:`timetravel.torch.metric` calls (a no-op outside the simulator);
* ``SummaryWriter.add_scalar(tag, value, global_step)`` and ``add_scalars`` of
  ``torch.utils.tensorboard`` — patched when the script imports it, which needs the tensorboard
  package (timetravel does not depend on it); the writer still writes its event files;
* ``wandb.log(data, step=...)`` — every numeric value of ``data``, with ``step`` or wandb's own
  step counter (one per committed call). wandb is forced off before the script imports it:
  ``WANDB_MODE=disabled`` (no network, no files, ``wandb.init`` returns a disabled run) and
  ``WANDB_SILENT=true``. Patched when the script imports wandb; timetravel does not depend on it.
"""

from __future__ import annotations

import contextlib
import numbers
import os
from typing import Any

from timetravel.torch import metrics
from timetravel.torch.metrics import Sink
from timetravel.torch.rank.env.patching import Installation, Patches, when_imported

WANDB_ENVIRONMENT = {"WANDB_MODE": "disabled", "WANDB_SILENT": "true"}


def install_metrics(sink: Sink) -> Installation:
    """Send the rank's metrics to ``sink`` (see the module docstring)."""
    patches = Patches()
    patches.on_undo(metrics.set_sink(sink))
    when_imported(
        patches, "torch.utils.tensorboard.writer", lambda module: patch_summary_writer(patches, module)
    )
    for key, value in WANDB_ENVIRONMENT.items():
        patches.set_item(os.environ, key, value)
    when_imported(patches, "wandb", lambda module: patch_wandb(patches, module))
    return Installation("metrics", patches, sink)


def scalar(value: Any) -> float | None:
    """``value`` as a float when it is one number (int, float, numpy scalar, one-element tensor)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    numel = getattr(value, "numel", None)
    if callable(numel) and numel() == 1:
        return float(value)
    if getattr(value, "shape", None) == () and hasattr(value, "dtype"):
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    return None


def patch_summary_writer(patches: Patches, module: Any) -> None:
    """Wrap ``SummaryWriter.add_scalar``/``add_scalars`` of the tensorboard writer ``module``."""
    writer_class = module.SummaryWriter

    def wrap_add_scalar(original: Any) -> Any:
        def add_scalar(
            self: Any, tag: str, scalar_value: Any, global_step: int | None = None, *args: Any, **kwargs: Any
        ) -> Any:
            value = scalar(scalar_value)
            if value is not None:
                metrics.metric(tag, value, _step(global_step))
            return original(self, tag, scalar_value, global_step, *args, **kwargs)

        return add_scalar

    def wrap_add_scalars(original: Any) -> Any:
        def add_scalars(
            self: Any,
            main_tag: str,
            tag_scalar_dict: dict[str, Any],
            global_step: int | None = None,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            for tag, scalar_value in tag_scalar_dict.items():
                value = scalar(scalar_value)
                if value is not None:
                    metrics.metric(f"{main_tag}/{tag}", value, _step(global_step))
            return original(self, main_tag, tag_scalar_dict, global_step, *args, **kwargs)

        return add_scalars

    patches.wrap(writer_class, "add_scalar", wrap_add_scalar)
    patches.wrap(writer_class, "add_scalars", wrap_add_scalars)


def _step(step: Any) -> int | None:
    if step is None:
        return None
    return int(step)


def patch_wandb(patches: Patches, module: Any) -> None:
    """Wrap ``wandb.log`` (and the ``log`` of the run ``wandb.init`` returns)."""
    counter = [0]

    def record(data: Any, step: Any, commit: Any) -> None:
        used = counter[0] if step is None else int(step)
        if isinstance(data, dict):
            for name, raw in data.items():
                value = scalar(raw)
                if value is not None:
                    metrics.metric(str(name), value, used)
        if commit is not False:
            counter[0] = used + 1

    def wrap_log(original: Any) -> Any:
        def log(data: Any = None, step: Any = None, commit: Any = None, *args: Any, **kwargs: Any) -> Any:
            record(data, step, commit)
            return original(data, step, commit, *args, **kwargs)

        log._timetravel_wrapped = True  # type: ignore[attr-defined]
        return log

    def wrap_init(original: Any) -> Any:
        def init(*args: Any, **kwargs: Any) -> Any:
            run = original(*args, **kwargs)
            # wandb.init rebinds the module's log to run.log: wrap that one again (each path once)
            current = module.__dict__.get("log")
            if current is not None and not getattr(current, "_timetravel_wrapped", False):
                patches.replace(module, "log", wrap_log(current))
            run_log = getattr(run, "log", None)
            if run_log is not None and not getattr(run_log, "_timetravel_wrapped", False):
                with contextlib.suppress(
                    AttributeError, TypeError
                ):  # a run refusing attributes: wandb.log still counts
                    run.log = wrap_log(run_log)
            return run

        return init

    patches.wrap(module, "log", wrap_log)
    patches.wrap(module, "init", wrap_init)
