"""Uninitialised parameters, named (issue 31, part 1): the nan failure names every rank that fed a NaN,
and ``explain`` names the parameters ``to_empty`` left unwritten, where their memory came from and the
last init call that ran, and maps FSDP2's flat all_gather input back to them.

tests/torch_scripts/fsdp2_uninit_blocks.py builds a model on ``meta``, shards it with ``fully_shard``,
calls ``to_empty`` and an ``init_weights`` that forgets the blocks. The expected names, lines and
sizes are read from the script and the model's shapes here, not from timetravel. The watch runs in
the probe's re-execution, whose Stepper checks every event against the recorded hash chain: a watch
that changed a bit of the World would raise instead of answering.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch_launch import TEST_SCRIPTS

from timetravel.explore import Session
from timetravel.explore.commands.render import render_text
from timetravel.explore.explain import explain
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.torch.rank.init_watch import InitWatch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "torch_scripts" / "fsdp2_uninit_blocks.py"
SHOWN = os.path.relpath(SCRIPT) if str(SCRIPT).startswith(os.getcwd() + os.sep) else str(SCRIPT)
"""How a site names the script: relative to where the run was launched from, when under it."""
WIDTH, DEPTH, RANKS = 16, 2, 2
BLOCK_PARAMETERS = {  # name in a block -> logical shape (Linear(16, 32), Linear(32, 16))
    "fc1.weight": [2 * WIDTH, WIDTH],
    "fc1.bias": [2 * WIDTH],
    "fc2.weight": [WIDTH, 2 * WIDTH],
    "fc2.bias": [WIDTH],
}


def _line_of(text: str) -> int:
    lines = SCRIPT.read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def _config(*settings: str) -> dict[str, Any]:
    scenario = get_scenario("torch")
    return scenario.resolve_config([f"script={SCRIPT}", f"nproc={RANKS}", "rank_output=quiet", *settings])


def test_the_nan_failure_names_every_rank_that_fed_one_whatever_the_seed() -> None:
    # before: seed 0 named r1 and seed 2 named r0 (whichever arrived first), and only that one
    for seed in (0, 2):
        _report, world = run_report(get_scenario("torch"), _config(), seed, launch=TEST_SCRIPTS)
        failure = world.failures[0]
        shard = sum(rows * columns for rows, columns in [(32, 16), (16, 32)]) // RANKS + (32 + 16) // RANKS
        assert failure["kind"] == "nan" and failure["node"] == "r0", failure
        assert failure["ranks"] == ["r0", "r1"]
        assert failure["nonfinite"] == {"r0": shard, "r1": shard}
        assert (failure["op"], failure["collective"], failure["tensor"]) == ("all_gather", "1#1", 0)
        assert failure["message"] == (
            f"r0 and r1 fed non-finite values into all_gather #1 of group 1: r0 {shard} in tensor 0 "
            f"(float32[{shard}]), r1 {shard} in tensor 0 (float32[{shard}])"
        )


@pytest.fixture(scope="module")
def uninit_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("torch_uninit") / "uninit.ttr"
    report, _ = record_run(get_scenario("torch"), _config(), 0, path, force=True, launch=TEST_SCRIPTS)
    assert report["failure"]["kind"] == "nan", report["failure"]
    return path


def test_explain_names_the_parameters_to_empty_left_unwritten(uninit_run: Path) -> None:
    with Session.open(uninit_run, launch=TEST_SCRIPTS) as session:
        result = explain(session)
        lines = render_text(result, session.display_unit)
    site = result.to_data()["site"]
    assert (site["rank"], site["step"]) == ("r0", 1)
    memory = site["uninitialised"]
    report = memory["report"]
    expected = [f"blocks.{block}.{name}" for block in range(DEPTH) for name in BLOCK_PARAMETERS]
    assert [item["name"] for item in report["uninitialised"]] == expected
    assert report["uninitialised_count"] == len(expected)
    assert report["parameters"] == len(expected) + 4  # and embed's and head's weight and bias, written
    to_empty = f"{SHOWN}:{_line_of('model.to_empty(')} in main"
    for item in report["uninitialised"]:
        shape = BLOCK_PARAMETERS[item["name"].split(".", 2)[2]]
        assert item["shape"] == shape and item["local_shape"] == [shape[0] // RANKS, *shape[1:]]
        assert item["uninitialised"] == item["elements"] == item["nan"]  # deterministic fill agrees
        assert item["origin"] == {"op": "aten::empty_like", "how": "to_empty", "site": to_empty}
    assert report["materialised"] == [to_empty]
    # the last init call that ran: init_weights zeroing head's bias (the blocks' loop never runs)
    last_line = _line_of("torch.nn.init.zeros_(layer.bias)")
    assert report["last_init"] == {
        "op": "aten::zero_",
        "site": f"{SHOWN}:{last_line} in init_weights",
        "parameter": "head.bias",
    }
    assert report["deterministic_fill"] is True and report["broken"] == ""
    # the flat all_gather input r0 fed: block 0's four shards, in order, every element non-finite
    collective = memory["collective"]
    assert (collective["op"], collective["seq"], collective["how"]) == ("all_gather", 1, "fsdp2")
    starts = 0
    for segment, name in zip(collective["segments"], expected[:4], strict=True):
        shape = BLOCK_PARAMETERS[name.split(".", 2)[2]]
        size = shape[0] // RANKS * (shape[1] if len(shape) > 1 else 1)
        assert (segment["name"], segment["start"], segment["elements"]) == (name, starts, size)
        assert segment["nonfinite"] == size
        starts += size
    assert collective["shape"] == [starts]
    assert (
        f"  uninitialised: 8 of 12 parameters were never written after their memory was allocated (by to_empty() at {to_empty}):"
        in lines
    )
    assert any(
        line.startswith("    blocks.0.fc1.weight  float32[32, 16] (this rank's shard [16, 16])")
        for line in lines
    )
    assert (
        f"  last init call that ran: aten::zero_ on head.bias at {SHOWN}:{last_line} in init_weights" in lines
    )


class _Channel:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.call_observers: list[Any] = []

    def post(self, message: dict[str, Any]) -> None:
        self.messages.append(message)


def test_the_watch_follows_what_each_op_writes_not_the_nan_fill() -> None:
    """In-process: the watch reads each op's schema; a write initialises, garbage in stays garbage,
    and with deterministic mode off (no NaN fill) the parameters are still named."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    channel = _Channel()
    position: dict[int, str] = {}
    watch = InitWatch(channel, 1, lambda module, name: f"{position[id(module)]}.{name}")  # type: ignore[arg-type]
    try:
        watch.install()
        with torch.device("meta"):
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
        position.update({id(layer): str(index) for index, layer in enumerate(model)})
        model.to_empty(device="cpu")
        with torch.no_grad():
            model[0].weight.normal_()  # written whole
            model[0].bias.zero_()
            model[1].weight[:2].fill_(1.0)  # half written
            model[1].bias.mul_(0.0)  # garbage times 0 is garbage: read before written
            model[2].weight.copy_(torch.empty(4, 4))  # a copy of garbage
            model[2].bias.copy_(torch.zeros(4))
        model(torch.ones(1, 4))
    finally:
        watch.close()
        torch.use_deterministic_algorithms(deterministic)
    report = channel.messages[0]["init"]
    assert [(item["name"], item["elements"], item["uninitialised"]) for item in report["uninitialised"]] == [
        ("1.weight", 16, 8),  # rows 2-3
        ("1.bias", 4, 4),
        ("2.weight", 16, 16),  # copied from torch.empty
    ]
    assert report["parameters"] == 6
    assert report["uninitialised"][2]["origin"]["how"] == "empty"  # the garbage came from torch.empty
    assert report["uninitialised"][0]["origin"]["how"] == "to_empty"
    assert report["deterministic_fill"] is False
    assert report["last_init"]["op"] == "aten::copy_"
    assert (
        torch.nn.Module.to_empty.__name__ == "to_empty"
        and torch.nn.Module.to_empty.__module__ == "torch.nn.modules.module"
    )


def test_a_nan_fed_into_a_collective_that_never_completes_is_still_a_nan() -> None:
    script = ROOT / "tests" / "torch_scripts" / "nan_then_exit.py"
    config = get_scenario("torch").resolve_config([f"script={script}", "nproc=2", "rank_output=quiet"])
    _report, world = run_report(get_scenario("torch"), config, 0, launch=TEST_SCRIPTS)
    failure = world.failures[0]
    assert (failure["kind"], failure["node"], failure["ranks"]) == ("nan", "r0", ["r0"]), failure
    assert (
        failure["message"]
        == "r0 fed 1 non-finite value(s) into all_reduce #2 of group 0 (tensor 0, float32[4])"
    )
