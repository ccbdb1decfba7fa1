"""Metrics capture inside a rank: metric(), SummaryWriter.add_scalar and wandb.log reach the sink."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
import torch

import timetravel.torch
from timetravel.torch.metrics import metric
from timetravel.torch.rank.env.metrics_capture import install_metrics, patch_summary_writer
from timetravel.torch.rank.env.patching import Patches

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent

FAKE_WANDB = '''
"""A stand-in for wandb with its module-level shape: init() rebinds wandb.log to run.log."""
import os
import sys

mode_at_import = os.environ.get("WANDB_MODE")
logged = []


class Run:
    def log(self, data, step=None, commit=None):
        logged.append(("run", data, step))


def log(data, step=None, commit=None):
    raise RuntimeError("You must call wandb.init() before wandb.log()")


def init(**kwargs):
    run = Run()
    sys.modules[__name__].log = run.log
    return run
'''


def collect() -> tuple[list[tuple[str, float, int | None]], Any]:
    records: list[tuple[str, float, int | None]] = []

    def sink(name: str, value: float, step: int | None) -> None:
        records.append((name, value, step))

    return records, sink


def test_metric_is_a_no_op_outside_the_simulator() -> None:
    metric("loss", 1.0)  # nothing installed: nothing happens, nothing raises
    assert not timetravel.torch.metrics.active()


def test_metric_reaches_the_sink_inside_a_rank() -> None:
    records, sink = collect()
    with install_metrics(sink):
        metric("loss", torch.tensor(0.5), step=3)
        metric("lr", 1e-3)
        with pytest.raises(ValueError, match="metric name"):
            metric("", 1.0)
    metric("after", 2.0)
    assert records == [("loss", 0.5, 3), ("lr", 1e-3, None)]


def test_summary_writer_scalars_reach_the_sink() -> None:
    written: list[tuple[Any, ...]] = []

    class SummaryWriter:
        def add_scalar(
            self, tag: str, scalar_value: Any, global_step: Any = None, walltime: Any = None
        ) -> None:
            written.append((tag, scalar_value, global_step))

        def add_scalars(
            self, main_tag: str, tag_scalar_dict: dict[str, Any], global_step: Any = None
        ) -> None:
            written.append((main_tag, global_step))

    writer_module = types.SimpleNamespace(SummaryWriter=SummaryWriter)
    records, sink = collect()
    patches = Patches()
    with install_metrics(sink):
        patch_summary_writer(patches, writer_module)
        writer = SummaryWriter()
        writer.add_scalar("train/loss", torch.tensor(2.0), 7)
        writer.add_scalars("lr", {"group0": 0.1, "group1": 0.2}, global_step=8)
        writer.add_scalar("image-ish", torch.ones(3), 9)  # not a scalar: passed through, not recorded
    patches.undo()
    assert records == [("train/loss", 2.0, 7), ("lr/group0", 0.1, 8), ("lr/group1", 0.2, 8)]
    assert len(written) == 3  # the writer still writes


def test_wandb_is_forced_off_and_its_logs_reach_the_sink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "wandb.py").write_text(FAKE_WANDB)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    mode_before = os.environ.get("WANDB_MODE")
    records, sink = collect()
    with install_metrics(sink):
        import wandb  # type: ignore[import-not-found]

        assert wandb.mode_at_import == "disabled"
        run = wandb.init(project="p")
        wandb.log({"loss": 1.5, "text": "skip me"})
        run.log({"loss": 1.25}, commit=False)
        run.log({"acc": 0.5})
        wandb.log({"loss": 1.0}, step=10)
    sys.modules.pop("wandb", None)
    assert records == [("loss", 1.5, 0), ("loss", 1.25, 1), ("acc", 0.5, 1), ("loss", 1.0, 10)]
    assert len(wandb.logged) == 4  # each call logged once, through whichever path the script used
    assert os.environ.get("WANDB_MODE") == mode_before


def test_the_package_imports_without_torch() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # any import of torch now fails
        import timetravel.torch
        from timetravel.torch.metrics import metric
        metric("loss", 1.0)
        import timetravel.torch.rank.env.clock
        print("ok")
        """
    )
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120
    )
    assert result.stdout.strip() == "ok", result.stderr
