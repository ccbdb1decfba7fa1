"""A torch run's training state in the World: params, optimizer state, local grads, metrics, digests.

Real torch, real rank processes, 2 ranks and a few steps each.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch_state_functions
from torch_recordings import DDP_MLP, ROOT, TIMETRAVEL, record_torchrun

from timetravel.scenarios import get_scenario
from timetravel.sim.elided import ElidedArray
from timetravel.sim.encoding import digest
from timetravel.sim.runner import run_report
from timetravel.sim.world import World
from timetravel.torch.api import function_target
from timetravel.torch.world.specs import launch_naming, launch_naming_function


def run_function(function: Any, **settings: Any) -> tuple[dict[str, Any], World]:
    target = function_target(function)
    launch = launch_naming_function(target)
    scenario = get_scenario("torch")
    config = scenario.resolve_config({"function": target, "nproc": 2, "rank_output": "quiet", **settings})
    return run_report(scenario, config, 0, launch=launch)


def run_script(script: Path, *settings: str) -> tuple[dict[str, Any], World]:
    launch = launch_naming([str(script)])
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", "nproc=2", "rank_output=quiet", *settings])
    return run_report(scenario, config, 0, launch=launch)


def returns(world: World) -> list[Any]:
    return [world.nodes["c10d"]["returns"][str(rank)] for rank in range(2)]


@pytest.fixture(scope="module")
def ddp_run() -> tuple[dict[str, Any], World]:
    return run_function(torch_state_functions.ddp_sgd)


@pytest.fixture(scope="module")
def ddp_values(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The same run recorded, its end re-executed with every state step's values pulled: a passed
    run's World keeps its local gradients as digests (world/state_pull.py), rebuilt by re-execution."""
    from timetravel.explore import Session
    from timetravel.recording import record_run

    target = function_target(torch_state_functions.ddp_sgd)
    launch = launch_naming_function(target)
    scenario = get_scenario("torch")
    config = scenario.resolve_config({"function": target, "nproc": 2, "rank_output": "quiet"})
    path = tmp_path_factory.mktemp("state") / "ddp.ttr"
    report, world = record_run(scenario, config, 0, path, launch=launch)
    assert report["outcome"] == "pass", report["failure"]
    assert isinstance(world.nodes["r0"]["grads"]["0.weight"], ElidedArray)  # digests only
    with Session.open(path, launch=launch) as session, session.with_values():
        session.goto("end")
        return session.world


def test_params_and_buffers_are_the_script_s_final_state_dict_by_name(ddp_run: Any) -> None:
    report, world = ddp_run
    assert report["outcome"] == "pass", report["failure"]
    for rank, returned in enumerate(returns(world)):
        node = world.nodes[f"r{rank}"]
        assert node["state_step"] == 3
        assert sorted(node["params"]) == sorted(returned["state_dict"])  # no ``module.`` prefix
        for name, value in returned["state_dict"].items():
            stored = node["params"][name]
            assert np.array_equal(stored, np.asarray(value, dtype=stored.dtype)), name
        assert "1.running_mean" in node["params"]  # a buffer of the state_dict, not only parameters


def test_optimizer_state_and_learning_rate_are_stored_per_parameter_name(ddp_run: Any) -> None:
    _report, world = ddp_run
    for rank, returned in enumerate(returns(world)):
        optimizer = world.nodes[f"r{rank}"]["optimizer"]
        for name, value in returned["momentum"].items():
            assert np.array_equal(optimizer[name]["momentum_buffer"], np.asarray(value, dtype=np.float32))
        assert optimizer["param_groups"]["0"]["lr"] == 0.1
        assert optimizer["param_groups"]["0"]["momentum"] == 0.9


def test_grads_are_each_rank_s_own_before_ddp_averages_them(ddp_run: Any, ddp_values: World) -> None:
    _report, run_world = ddp_run
    world = ddp_values
    first, second = (world.nodes[f"r{rank}"]["grads"] for rank in range(2))
    final = [world.nodes[f"r{rank}"]["params"] for rank in range(2)]
    reduced = returns(world)[0]["reduced_grads"]
    for name in reduced:
        assert not np.array_equal(first[name], second[name]), name  # different data: different grads
        assert np.array_equal(final[0][name], final[1][name]), name  # the replicas agree after the step
        average = (first[name].astype(np.float64) + second[name]) / 2
        assert np.allclose(average, np.asarray(reduced[name]), rtol=1e-5, atol=1e-7), name
        assert digest(first[name]) == digest(run_world.nodes["r0"]["grads"][name])  # the run's own


def test_per_step_metrics_lr_grad_norm_update_ratio_and_scalar_all_reduces(
    ddp_run: Any, ddp_values: World
) -> None:
    _report, world = ddp_run
    metrics = world.metrics
    assert sorted(node for _t, node, _v in metrics["lr"]) == ["r0", "r0", "r0", "r1", "r1", "r1"]
    assert {value for _t, _node, value in metrics["lr"]} == {0.1}
    for rank in range(2):
        grads = ddp_values.nodes[f"r{rank}"]["grads"]
        last_norm = [value for _t, node, value in metrics["grad_norm/0.weight"] if node == f"r{rank}"][-1]
        assert last_norm == pytest.approx(float(np.linalg.norm(grads["0.weight"].astype(np.float64))))
        ratios = [value for _t, node, value in metrics["update_ratio/0.weight"] if node == f"r{rank}"]
        assert len(ratios) == 3 and all(0 < ratio < 1 for ratio in ratios)
    # the script's loss all_reduce (one element, the first after each step): one metric per step
    assert len(metrics["allreduce/0/0"]) == 3
    assert all(node == "c10d" for _t, node, _v in metrics["allreduce/0/0"])


def test_every_collective_leaves_digests_and_nonfinite_counts_per_rank(ddp_run: Any) -> None:
    _report, world = ddp_run
    last = world.nodes["c10d"]["last"]
    for rank in ("0", "1"):
        record = last[rank]
        assert record["op"] == "all_reduce" and record["state"] == "completed"
        assert record["key"] == f"{record['group']}#{record['seq']}"
        assert record["in_nonfinite"] == 0 and record["out_nonfinite_total"] == 0
        assert len(record["in_digest"]) == len(record["out_digest"]) == 1
    assert last["0"]["out_digest"] == last["1"]["out_digest"]  # every rank receives the same sum
    assert last["0"]["in_digest"] != last["1"]["in_digest"]  # of different losses
    assert last["0"]["count"] == last["1"]["count"] >= 6  # the DDP buckets and the loss, 3 steps


def test_state_every_steps_zero_stores_no_state() -> None:
    report, world = run_function(torch_state_functions.ddp_sgd, state_every_steps=0)
    assert report["outcome"] == "pass", report["failure"]
    for rank in range(2):
        node = world.nodes[f"r{rank}"]
        assert not {"params", "grads", "optimizer", "state_step"} & set(node)
    assert not any(name.startswith(("grad_norm/", "update_ratio/")) for name in world.metrics)
    assert len(world.metrics["lr"]) == 6  # the learning rate is still a metric at every step


def test_state_every_two_steps_stores_the_second() -> None:
    _report, world = run_function(torch_state_functions.ddp_sgd, state_every_steps=2)
    assert world.nodes["r0"]["state_step"] == 2


def test_state_above_state_bytes_max_stays_digests_and_hashes_as_the_bytes() -> None:
    report, world = run_function(torch_state_functions.ddp_sgd, state_bytes_max=64)
    assert report["outcome"] == "pass", report["failure"]
    node = world.nodes["r0"]
    assert isinstance(node["params"]["0.weight"], ElidedArray)  # no pull of its bytes was allowed
    assert isinstance(node["grads"]["0.weight"], ElidedArray)
    assert isinstance(node["optimizer"]["0.weight"]["momentum_buffer"], ElidedArray)
    assert node["optimizer"]["param_groups"]["0"]["lr"] == 0.1
    _report, pulled = run_function(torch_state_functions.ddp_sgd)
    assert isinstance(pulled.nodes["r0"]["params"]["0.weight"], np.ndarray)
    assert digest(node) == digest(pulled.nodes["r0"])  # the same state, with or without its bytes


def test_a_state_larger_than_one_pull_crosses_in_several_with_the_same_bytes(monkeypatch: Any) -> None:
    # bench torch's bigger workload (10M parameters, AdamW: 160 MB a step) kept no state at all: one
    # pull carried a whole step, refused above 64 MiB. A step now crosses in pulls of at most
    # STATE_PULL_BYTES_MAX bytes; here 64, so the weights go one by one, the biases a few together.
    from timetravel.torch.world import driver, state_pull

    _report, whole = run_function(torch_state_functions.ddp_sgd)
    pulls: list[list[str]] = []
    original = driver.RankDriver.pull

    def counted(self: Any, rank: int, request: dict[str, Any]) -> dict[str, Any]:
        pulls.append(list(request["paths"]))
        return original(self, rank, request)

    monkeypatch.setattr(driver.RankDriver, "pull", counted)
    monkeypatch.setattr(state_pull, "STATE_PULL_BYTES_MAX", 64)
    report, batched = run_function(torch_state_functions.ddp_sgd)
    assert report["outcome"] == "pass", report["failure"]
    sizes = {f"params/{name}": value.nbytes for name, value in whole.nodes["r0"]["params"].items()}
    assert len(pulls) > 2 and sizes["params/0.weight"] > 64
    for paths in pulls:  # a pull of several tensors stays within the limit; a larger one goes alone
        assert len(paths) == 1 or sum(sizes.get(path, 0) for path in paths) <= 64, paths
    for rank in range(2):
        node, expected = batched.nodes[f"r{rank}"], whole.nodes[f"r{rank}"]
        for name, value in expected["params"].items():
            assert isinstance(node["params"][name], np.ndarray), name
            assert np.array_equal(node["params"][name], value), name
        momentum = node["optimizer"]["0.weight"]["momentum_buffer"]
        assert np.array_equal(momentum, expected["optimizer"]["0.weight"]["momentum_buffer"])
        assert digest(node) == digest(expected)


def test_fsdp2_shards_are_reassembled_into_the_logical_tensor_on_every_rank() -> None:
    report, world = run_function(torch_state_functions.fsdp2_adam)
    assert report["outcome"] == "pass", report["failure"]
    logical = returns(world)[0]
    for rank in range(2):
        node = world.nodes[f"r{rank}"]
        assert sorted(node["params"]) == sorted(logical)
        for name, value in logical.items():
            assert np.array_equal(node["params"][name], np.asarray(value, dtype=np.float32)), name
        # the rank's own shard, and its optimizer state, as the rank holds them (dim 0, rank order)
        shard = node["shards"]["0.weight"]
        assert np.array_equal(
            shard, np.asarray(logical["0.weight"], dtype=np.float32)[rank * 3 : rank * 3 + 3]
        )
        assert node["optimizer"]["0.weight"]["exp_avg"].shape == shard.shape


def test_grad_scaler_reports_its_scale_and_found_inf() -> None:
    # an inf in a scaled gradient is what a GradScaler is for: detect_nan would stop the run at it
    report, world = run_function(torch_state_functions.grad_scaler_with_an_inf, detect_nan=False)
    assert report["outcome"] == "pass", report["failure"]
    scale = [value for _t, node, value in world.metrics["scale"] if node == "r1"]
    found = [value for _t, node, value in world.metrics["found_inf"] if node == "r1"]
    assert scale == [1024.0, 1024.0, 512.0]  # the inf at step 1 halves the scale
    assert found == [0.0, 1.0, 0.0]  # DDP averaged rank 0's inf into rank 1's gradient


def test_inspect_on_a_recording_shows_the_params_by_name(tmp_path: Path) -> None:
    recording = tmp_path / "run.ttr"
    recorded = record_torchrun(recording, DDP_MLP)
    assert recorded.returncode == 0, recorded.stderr
    inspected = subprocess.run(
        [*TIMETRAVEL, "inspect", str(recording), "--path", "nodes/r1/params", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert inspected.returncode == 0, inspected.stderr
    assert {"0.weight", "0.bias", "2.weight", "2.bias"} <= set(json.loads(inspected.stdout)["value"])


def test_find_first_names_the_rank_and_collective_where_a_nan_entered(tmp_path: Path) -> None:
    recording = tmp_path / "nan.ttr"
    command = [*TIMETRAVEL, "torchrun", "--nproc-per-node", "3", "--set", "detect_nan=false"]
    command += ["--set", "detect_divergence=false", "--record", str(recording), str(DDP_MLP)]
    recorded = subprocess.run(
        [*command, "--steps", "9", "--bug", "nan_data"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert recorded.returncode == 0, recorded.stderr  # nothing stops the NaN: it spreads to every rank
    found = subprocess.run(
        [
            *TIMETRAVEL,
            "shell",
            str(recording),
            "--script",  # the search re-executes the script between snapshots
            str(DDP_MLP),
            "--no-history",
            "--json",
            "-c",
            "find-first nodes/c10d/last/*/in_nonfinite > 0 --go; print nodes/c10d/last/2/key; "
            "find-first nonfinite(nodes/*/params)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert found.returncode == 0, found.stderr
    lines = [json.loads(line) for line in found.stdout.splitlines() if line.startswith("{")]
    result = lines[0]["result"]
    assert result["witnesses"] == ["nodes/c10d/last/2/in_nonfinite"]  # rank 2 fed it, alone
    assert lines[1]["result"]["entries"][0]["summary"] == "'0#20'"  # the first gradient all_reduce of step 7
    params = lines[2]["result"]  # the parameters go NaN later, on every replica, r0 first: not the culprit
    assert params["found"] and params["t_ns"] > result["t_ns"]
    assert params["witnesses"] == ["nodes/r0/params"]


def test_the_fsdp2_example_stores_the_same_logical_tensors_on_every_rank() -> None:
    report, world = run_script(ROOT / "docs" / "examples" / "torch" / "fsdp2_gpt.py", "args=--steps 2")
    assert report["outcome"] == "pass", report["failure"]
    first, second = (world.nodes[f"r{rank}"] for rank in range(2))
    assert first["state_step"] == second["state_step"] == 2
    # names as in the root's state_dict (fully_shard(block) listed them as ``norm1.weight`` first)
    assert "blocks.1.norm1.weight" in first["params"] and "norm1.weight" not in first["params"]
    assert first["params"]["blocks.0.attention.weight"].shape == (192, 64)  # logical, not the (96, 64) shard
    for name, logical in first["params"].items():
        assert np.array_equal(logical, second["params"][name]), name
        if name in first["shards"]:
            layout = first["shards_layout"][name]
            whole = np.concatenate([first["shards"][name], second["shards"][name]], axis=layout["dim"])
            assert np.array_equal(whole[: layout["shape"][0]], logical), name


def test_each_param_group_s_learning_rate_is_a_metric_and_adam_state_is_stored() -> None:
    report, world = run_function(torch_state_functions.two_param_groups)
    assert report["outcome"] == "pass", report["failure"]
    assert [value for _t, node, value in world.metrics["lr"] if node == "r0"] == [0.01, 0.01]
    assert [value for _t, node, value in world.metrics["lr/1"] if node == "r0"] == [0.002, 0.002]
    optimizer = world.nodes["r0"]["optimizer"]
    assert optimizer["param_groups"]["1"]["lr"] == 0.002
    assert optimizer["param_groups"]["0"]["betas"] == [0.9, 0.999]
    assert set(optimizer["1.weight"]) == {"step", "exp_avg", "exp_avg_sq"}
    assert float(optimizer["1.weight"]["step"]) == 2.0


def test_wrapper_prefixes_are_whole_name_segments_only() -> None:
    from timetravel.torch.rank.state import strip_prefixes

    assert strip_prefixes("module._orig_mod.0.weight") == "0.weight"  # DDP over torch.compile
    assert strip_prefixes("submodule.weight") == "submodule.weight"  # a user's name is not cut
