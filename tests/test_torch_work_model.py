"""The ``flops`` compute model: a rank's compute time from the products it runs (rank_env.work_model).

Exact virtual times: the counts depend only on shapes, so a step of known work costs a known number
of nanoseconds, and the World charges exactly that on top of the fixed interval.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as functional
from test_torch_run import SCRIPTS, simulate_world

from timetravel.torch.rank.env.work_model import WorkMeter, install_work_model

KNOWN_WORK = SCRIPTS / "known_work.py"
GIGAFLOP_PER_S = 1_000_000_000  # 1 flop = 1 ns: the charges below read as flop counts
STEP_FLOPS = 8_192 + 2 * 8_192  # known_work.py: a step's forward and its backward debt


@pytest.fixture
def meter() -> WorkMeter:
    counting = WorkMeter(GIGAFLOP_PER_S)
    installation = install_work_model(counting)
    yield counting
    installation.uninstall()


def test_the_meter_charges_integer_ns_and_carries_the_remainder() -> None:
    meter = WorkMeter(3_000_000_000)  # 3 flops a ns
    meter.forward(10, needs_backward=False)
    assert meter.take_ns() == 3  # 10 flops = 3 ns and 1 flop carried
    meter.forward(2, needs_backward=False)
    assert meter.take_ns() == 1  # the carried flop and 2 more: exactly 1 ns
    assert meter.take_ns() == 0


@pytest.mark.parametrize("rate", [0, -1, 1.5, True])
def test_a_rate_that_is_not_a_positive_integer_is_refused(rate: object) -> None:
    with pytest.raises(ValueError, match="flops_per_s must be a positive integer"):
        WorkMeter(rate)  # type: ignore[arg-type]


def test_products_are_counted_at_two_flops_per_multiply_add(meter: WorkMeter) -> None:
    functional.linear(torch.ones(5, 4), torch.ones(3, 4))
    assert meter.take_ns() == 2 * 5 * 4 * 3
    torch.ones(2, 3, 4) @ torch.ones(4, 6)  # batch dims broadcast
    assert meter.take_ns() == 2 * 2 * 3 * 4 * 6
    torch.bmm(torch.ones(2, 3, 4), torch.ones(2, 4, 5))
    torch.addmm(torch.ones(3, 5), torch.ones(3, 4), torch.ones(4, 5))
    assert meter.take_ns() == 2 * 2 * 3 * 4 * 5 + 2 * 3 * 4 * 5
    functional.conv2d(torch.ones(1, 2, 5, 5), torch.ones(4, 2, 3, 3))  # output 1x4x3x3
    assert meter.take_ns() == 2 * (4 * 3 * 3) * (2 * 3 * 3)
    query = torch.ones(1, 2, 6, 8)
    functional.scaled_dot_product_attention(query, torch.ones(1, 2, 7, 8), torch.ones(1, 2, 7, 8))
    assert meter.take_ns() == 2 * (2 * 6) * 7 * (8 + 8)


def test_element_wise_work_is_not_counted(meter: WorkMeter) -> None:
    (torch.ones(100, 100) * 2 + 1).relu().sum()
    assert meter.take_ns() == 0


def test_backward_owes_twice_the_forward_of_products_that_need_a_gradient(meter: WorkMeter) -> None:
    weight = torch.ones(4, 3, requires_grad=True)
    loss = (torch.ones(5, 4) @ weight).sum()
    with torch.no_grad():
        torch.ones(5, 4) @ torch.ones(4, 3)  # no gradient: no debt
    assert meter.take_ns() == 2 * (2 * 5 * 4 * 3)
    assert meter.backward_flops_owed == 2 * (2 * 5 * 4 * 3)
    loss.backward()
    assert meter.take_ns() == 2 * (2 * 5 * 4 * 3)  # charged as one block when backward() starts
    assert meter.backward_flops_owed == 0


def test_backward_is_charged_when_the_loss_capture_wrapped_autograd_backward(meter: WorkMeter) -> None:
    from timetravel.torch.rank.env.loss_capture import LossCapture, install_loss_capture

    capture = install_loss_capture(LossCapture(lambda *_: None, lambda: 0))
    try:
        weight = torch.ones(4, 3, requires_grad=True)
        loss = (torch.ones(5, 4) @ weight).sum()
        meter.take_ns()
        torch.autograd.backward(loss)  # the wrapper calls the original, which hands the mode its wrapper
        assert meter.take_ns() == 2 * (2 * 5 * 4 * 3)
    finally:
        capture.uninstall()


def _run(model: str, *settings: str) -> dict:
    report, _world = simulate_world(
        KNOWN_WORK,
        2,
        0,
        f"compute_model={model}",
        f"compute_flops_per_s={GIGAFLOP_PER_S}",
        "compute_jitter=0",
        *settings,
    )
    assert report["outcome"] == "pass", report["failure"]
    return report


def test_a_step_of_known_work_costs_exactly_its_flops_in_simulated_time() -> None:
    fixed = _run("fixed")
    flops = _run("flops")
    assert flops["t_end_ns"] - fixed["t_end_ns"] == 3 * STEP_FLOPS  # ns, at 1 flop per ns


def test_a_slow_rank_computes_its_flops_slower_too() -> None:
    slow = '[{"kind": "slow", "target": "r1", "params": {"compute_factor": 2.0}}]'
    fixed = _run("fixed", f"faults={slow}")
    flops = _run("flops", f"faults={slow}")
    assert flops["t_end_ns"] - fixed["t_end_ns"] == 2 * 3 * STEP_FLOPS  # r1's flops at half speed


def test_flops_are_charged_the_same_on_every_run() -> None:
    first = _run("flops")
    second = _run("flops")
    assert first["hash_chain"] == second["hash_chain"]
