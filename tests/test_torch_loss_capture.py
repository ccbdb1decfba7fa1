"""The loss without touching the script: the scalar backward is called on becomes metric ``loss``."""

from __future__ import annotations

import io
import re
from pathlib import Path

import torch

from timetravel.explore import Session
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.torch.rank.env.loss_capture import LossCapture, install_loss_capture
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"


def capture_into(sent: list[tuple[str, float, int, int]]) -> LossCapture:
    now = [100]
    return LossCapture(lambda name, value, step, t_ns: sent.append((name, value, step, t_ns)), lambda: now[0])


def train_step(seed: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    inputs = torch.randn(5, 4)
    loss = torch.nn.functional.mse_loss(model(inputs), inputs.sum(dim=1, keepdim=True))
    loss.backward()
    return loss, [parameter.grad.clone() for parameter in model.parameters()]


def test_the_captured_loss_is_the_backward_scalar_and_changes_no_bit() -> None:
    plain_loss, plain_grads = train_step(7)
    sent: list[tuple[str, float, int, int]] = []
    capture = capture_into(sent)
    with install_loss_capture(capture):
        loss, grads = train_step(7)
        capture.step_done(1)
        capture.flush()
    assert loss.view(torch.int32).item() == plain_loss.view(torch.int32).item()
    assert all(
        torch.equal(a.view(torch.int32), b.view(torch.int32)) for a, b in zip(grads, plain_grads, strict=True)
    )
    assert sent == [
        ("loss", float(plain_loss.detach()), 1, 100)
    ]  # the exact float32 value, at the step's time


def test_accumulated_backwards_sum_and_a_scaled_loss_counts_unscaled() -> None:
    sent: list[tuple[str, float, int, int]] = []
    capture = capture_into(sent)
    weight = torch.ones(3, requires_grad=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with install_loss_capture(capture):
        for factor in (1.0, 2.0):
            (weight.sum() * factor / 2).backward()  # gradient accumulation: (loss / 2) twice
        capture.step_done(1)
        capture.flush()
        scaler.scale(weight.sum()).backward()
        capture.step_done(2)
        capture.flush()
        torch.autograd.backward(weight * 2, torch.ones(3))  # explicit gradients: not a loss
        capture.step_done(3)
        capture.flush()
    assert [(name, value, step) for name, value, step, _t in sent] == [("loss", 4.5, 1), ("loss", 3.0, 2)]


def test_a_loss_the_script_logs_itself_wins_from_its_first_log() -> None:
    sent: list[tuple[str, float, int, int]] = []
    capture = capture_into(sent)
    weight = torch.ones(2, requires_grad=True)
    with install_loss_capture(capture):
        weight.sum().backward()
        capture.step_done(1)
        capture.script_metric("accuracy")  # another name changes nothing
        capture.script_metric("loss")  # logged after optimizer.step(): that step's captured one is dropped
        capture.flush()
        weight.sum().backward()
        capture.step_done(2)
        capture.flush()
    assert sent == []


def test_ddp_mlp_records_a_loss_per_rank_and_step_equal_to_what_it_prints(tmp_path: Path) -> None:
    printed = io.StringIO()
    launch = launch_naming([str(DDP_MLP)], output=printed)
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={DDP_MLP}", "nproc=3", "args=--steps 11"])
    report, _world = record_run(scenario, config, 0, tmp_path / "loss.ttr", force=True, launch=launch)
    assert report["outcome"] == "pass"
    lines = dict(re.findall(r"\[r0\] step (\d+) loss (\S+)", printed.getvalue()))
    assert set(lines) == {"0", "5", "10"}
    with Session.open(tmp_path / "loss.ttr", launch=launch) as session:
        series = session.metric_series("loss")
        reduced = [value for _t, _node, value in session.metric_series("allreduce/0/0")]
    per_rank = {rank: [value for _t, node, value in series if node == rank] for rank in ("r0", "r1", "r2")}
    assert all(len(values) == 11 for values in per_rank.values())  # one per optimizer step and rank
    for step in range(11):
        losses = [per_rank[rank][step] for rank in ("r0", "r1", "r2")]
        assert abs(sum(losses) - reduced[step]) <= 1e-6 * abs(reduced[step])  # what the script all_reduced
        if str(step) in lines:
            assert abs(sum(losses) / 3 - float(lines[str(step)])) <= 1e-6  # what it printed (6 decimals)
