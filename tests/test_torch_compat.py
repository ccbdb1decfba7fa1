"""Real scripts' ways into torch, each as real torch 2.13 takes it (issue 30, docs/torch.md's
compatibility table). Every test here failed before the fix it checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch_recordings import ROOT, TIMETRAVEL

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.torch.rank.env.clock import RankClock
from timetravel.torch.rank.env.cuda import install_cuda
from timetravel.torch.world.specs import launch_naming

SCRIPTS = ROOT / "tests" / "torch_scripts"
REAL_TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]


def simulate(script: Path, nproc: int = 2, *settings: str) -> dict[str, Any]:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", f"nproc={nproc}", "rank_output=quiet", *settings])
    return run_report(scenario, config, 0, launch=launch_naming([str(script)]))[0]


def torchrun(
    script: Path, *arguments: str, nproc: int = 2, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TIMETRAVEL, "torchrun", "--nproc-per-node", str(nproc), *options, str(script), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def real_torchrun(script: Path, *arguments: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    """The reference: real torchrun --standalone with gloo on loopback."""
    return subprocess.run(
        [*REAL_TORCHRUN, "--nproc-per-node", str(nproc), str(script), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"},
    )


# -- whose error: the simulator's own is `internal`, never "rN raised" (item 9) ----------------------


def _raised(action: Any) -> BaseException:
    try:
        action()
    except Exception as error:
        return error
    raise AssertionError("nothing raised")


def test_an_error_inside_timetravel_s_code_is_internal_and_the_script_s_own_is_not() -> None:
    from timetravel.torch.rank.backend import wire_to_tensor
    from timetravel.torch.rank.errors import describe_error, error_kind

    ours = _raised(lambda: wire_to_tensor({}))  # a KeyError in the backend's own code
    assert error_kind(ours) == "internal"
    described = describe_error(ours)
    assert described["where"].startswith(str(ROOT / "timetravel" / "torch" / "rank" / "backend.py"))
    assert "Traceback" in described["traceback"]
    assert error_kind(_raised(lambda: {}["key"])) == "exception"  # the test's (the script's) own code


def test_torch_s_answer_through_a_timetravel_wrapper_is_the_script_s_error() -> None:
    from timetravel.torch.rank.errors import error_kind

    with install_cuda(0, 2, RankClock()):
        wrong_argument = _raised(lambda: torch.zeros("two", device="cuda"))  # through the wrapped factory
        moved_wrongly = _raised(lambda: torch.ones(2).to("cuda", dtype="float"))  # through Tensor.to
        bad_ordinal = _raised(lambda: torch.cuda.set_device(7))  # raised on purpose, as CUDA does
    assert [error_kind(error) for error in (wrong_argument, moved_wrongly, bad_ordinal)] == ["exception"] * 3


def test_a_simulator_bug_in_a_rank_is_an_internal_failure_with_its_traceback() -> None:
    failure = simulate(SCRIPTS / "simulator_bug.py")["failure"]
    assert failure["kind"] == "internal"
    assert "raised" not in failure["message"]
    assert "not of your script" in failure["message"] and "report it" in failure["message"]
    assert "timetravel/torch/rank/backend.py" in failure["message"]
    assert "in tensor_to_wire" in failure["traceback"]
    result = torchrun(SCRIPTS / "simulator_bug.py")
    assert result.returncode == 1, result.stderr
    text = result.stdout
    assert "outcome: FAIL  internal on r" in text
    assert "  | Traceback (most recent call last):" in text


# -- every spelling of init_process_group lands on the simulator, as torch takes it (item 1) ----------

INIT_FORMS_CPU = [
    "no arguments: backend undefined all_reduce 3.0",
    "positional: backend gloo all_reduce 3.0",
    "keyword: backend gloo all_reduce 3.0",
    "upper case: backend gloo all_reduce 3.0",
    "per device: backend cpu:gloo all_reduce 3.0",
    "pg_options: backend gloo all_reduce 3.0",
    "timeout: backend gloo all_reduce 3.0",
    "rank and world_size: backend gloo all_reduce 3.0",
    "env://: backend gloo all_reduce 3.0",
    "tcp://: backend gloo all_reduce 3.0",
    "file://: backend gloo all_reduce 3.0",
    "store=: backend gloo all_reduce 3.0",
    "init_device_mesh: backend undefined all_reduce 3.0",
]
INIT_REFUSALS_CPU = [
    "twice: ValueError: trying to initialize the default process group twice!",
    "store and init_method: AssertionError: Cannot specify both init_method and store.",
    "device_id cpu: ValueError: init_process_group device_id parameter must be an accelerator with an index",
    "bad pairing: ValueError: Invalid device:backend pairing:                                      cpu:gloo:x."
    " The custom backend string argument is invalid: cpu:gloo:x.",
    "unknown backend: AssertionError: Unknown backend type carrier_pigeon",
    "tcp:// without rank: ValueError: Error initializing torch.distributed using tcp:// rendezvous: rank parameter"
    " missing",
    "timeout in seconds: TypeError: Expected timeout argument to be of type datetime.timedelta, got 30",
]
"""What real torchrun --standalone with gloo prints for each form (tests/torch_scripts/init_forms.py cpu)."""
INIT_FORMS_GPU = [
    "nccl: backend nccl all_reduce 3.0",
    "keyword nccl: backend nccl all_reduce 3.0",
    "cpu and cuda: backend cpu:gloo,cuda:nccl all_reduce 3.0",
    "device_id index: backend nccl all_reduce 3.0",
    "device_id cuda: backend nccl all_reduce 3.0",
]
INIT_REFUSALS_GPU = [
    "device_id out of range: ValueError: device_id cuda:7 is out of range. Please use a device index less than"
    " the number of accelerators available: 2.",
    "device_id without index: ValueError: Please use a device_id with index.",
]
"""What a CUDA build accepts and refuses besides (torch 2.13's init_process_group, read in its source)."""


def rank_lines(output: str, rank: int = 0) -> list[str]:
    prefix = f"[r{rank}] "
    return [line[len(prefix) :] for line in output.splitlines() if line.startswith(prefix)]


def test_every_form_of_init_process_group_reaches_the_simulator_as_torch_takes_it() -> None:
    result = torchrun(SCRIPTS / "init_forms.py", "gpu", options=("--set", "stuck_timeout=30"))
    assert result.returncode == 0, result.stdout[-3000:]
    lines = [line for line in rank_lines(result.stdout) if ": " in line and "Warning" not in line]
    expected = INIT_FORMS_CPU + INIT_FORMS_GPU + INIT_REFUSALS_CPU + INIT_REFUSALS_GPU
    assert lines == expected
    summary = result.stdout[result.stdout.index("outcome:") :]
    assert (
        f"collectives: {2 * (len(INIT_FORMS_CPU) + len(INIT_FORMS_GPU))}" in summary
    )  # none outside the World


def test_the_script_s_own_tcpstore_is_the_world_s_store() -> None:
    script = SCRIPTS / "init_forms.py"
    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        [f"script={script}", "nproc=2", "rank_output=quiet", "args=cpu store=", "stuck_timeout=30"]
    )
    report, world = run_report(scenario, config, 0, launch=launch_naming([str(script)]))
    assert report["outcome"] == "pass", report["failure"]
    assert {key: world.nodes["store"]["keys"][key] for key in ("own/0", "own/1")} == {
        "own/0": b"from 0",
        "own/1": b"from 1",
    }


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_real_torchrun_prints_the_same_for_every_form_it_can_run() -> None:
    for expected in INIT_FORMS_CPU + INIT_REFUSALS_CPU:
        form = expected.partition(": ")[0]
        result = real_torchrun(SCRIPTS / "init_forms.py", "cpu", form)
        assert expected in result.stdout, result.stdout[-2000:]  # ranks' lines may interleave: no split


# -- timeout= is the hang timeout, reported at its deadline with its number (item 2) ------------------


def test_a_rank_later_than_the_script_s_timeout_is_a_hang_at_that_timeout() -> None:
    failure = simulate(SCRIPTS / "late_rank.py", 2, "args=5 20")["failure"]
    assert failure["kind"] == "hang"
    assert failure["message"].startswith("r0 waited 5 s in all_reduce")
    assert 5_000_000_000 <= failure["t_ns"] < 5_001_000_000  # at its deadline, not when r1 turns up


def test_a_long_timeout_of_the_script_s_lets_a_late_rank_through() -> None:
    report = simulate(SCRIPTS / "late_rank.py", 2, "args=1800 1000")  # 30 minutes: not the run's 600 s
    assert report["outcome"] == "pass", report["failure"]


def test_without_a_timeout_the_run_s_hang_timeout_is_the_one_number_reported() -> None:
    failure = simulate(SCRIPTS / "late_rank.py", 2, "args=none 1000")["failure"]
    assert failure["kind"] == "hang" and failure["message"].startswith("r0 waited 600 s in all_reduce")
    assert 600_000_000_000 <= failure["t_ns"] < 600_001_000_000


# -- the meta device keeps its meaning; only cuda is mapped (item 3) -----------------------------------


def _meta_initialised(device: str) -> tuple[tuple[str, str], list[torch.Tensor], torch.Tensor]:
    """The meta-device idiom (FSDP2's): build on meta, then to_empty and initialise on the device."""
    torch.manual_seed(0)
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
        made = torch.zeros(3)
    devices = (model[0].weight.device.type, made.device.type)
    model.to_empty(device=device)
    for layer in model:
        layer.reset_parameters()  # type: ignore[operator]
    return devices, [parameter.detach().clone() for parameter in model.parameters()], torch.get_rng_state()


def test_the_meta_device_keeps_its_meaning_and_initialises_as_torch_does() -> None:
    expected = _meta_initialised("cpu")  # torch as it is, on this CPU host
    with install_cuda(0, 2, RankClock()):
        devices, parameters, rng_state = _meta_initialised("cuda")
        with torch.device("cuda"):  # only cuda is mapped: CPU tensors
            mapped = (torch.nn.Linear(2, 2).weight.device.type, torch.zeros(2).device.type)
    assert devices == expected[0] == ("meta", "meta")
    assert all(torch.equal(got, want) for got, want in zip(parameters, expected[1], strict=True))
    assert torch.equal(rng_state, expected[2])  # building on meta drew nothing from the generator
    assert mapped == ("cpu", "cpu")


# -- torch.accelerator agrees with the simulated torch.cuda (item 4) ----------------------------------


def test_torch_accelerator_answers_as_a_gpu_node_s() -> None:
    with install_cuda(1, 2, RankClock()):
        answers = (
            torch.accelerator.is_available(),
            torch.accelerator.device_count(),
            torch.accelerator.current_accelerator(),
            torch.accelerator.current_device_index(),
        )
        torch.accelerator.set_device_index(torch.device("cuda", 1))
        current = (torch.accelerator.current_device_index(), torch.cuda.current_device())
        with pytest.raises(ValueError, match="cpu doesn't match the current accelerator cuda"):
            torch.accelerator.set_device_index("cpu")  # torch's own check, against the mapped answer
        capturing = torch.accelerator.current_stream().is_capturing()
    assert answers == (True, 2, torch.device("cuda"), 0)
    assert current == (1, 1) and capturing is False
    assert torch.accelerator.current_accelerator() is None  # uninstalled: this host has no accelerator


def test_a_script_that_asks_only_torch_accelerator_trains() -> None:
    report = simulate(SCRIPTS / "accelerator_only.py")
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["optimizer_steps"] == 3 and report["summary"]["collectives"] > 0


# -- every device spelling (item 5) -------------------------------------------------------------------


def test_every_spelling_of_a_cuda_device_moves_modules_and_tensors() -> None:
    module_moves = {
        "to(1)": lambda module: module.to(1),
        "to(torch.device(1))": lambda module: module.to(torch.device(1)),
        "to(device=1)": lambda module: module.to(device=1),
        "to(1, torch.float64)": lambda module: module.to(1, torch.float64),
        "to('cuda:1')": lambda module: module.to("cuda:1"),
        "to(torch.device('cuda', 1))": lambda module: module.to(torch.device("cuda", 1)),
        "cuda(1)": lambda module: module.cuda(1),
    }
    tensor_moves = {
        "to(1)": lambda tensor: tensor.to(1),
        "to(torch.device(1))": lambda tensor: tensor.to(torch.device(1)),
        "to(device=1, non_blocking=True)": lambda tensor: tensor.to(device=1, non_blocking=True),
        "cuda(non_blocking=True)": lambda tensor: tensor.cuda(non_blocking=True),
        "pin_memory()": lambda tensor: tensor.pin_memory(),
        "zeros(device=torch.device(1))": lambda tensor: torch.zeros(2, device=torch.device(1)),
        "zeros(device=1)": lambda tensor: torch.zeros(2, device=1),
        "tensor(device='cuda:1')": lambda tensor: torch.tensor([1.0, 2.0], device="cuda:1"),
        "empty(pin_memory=True)": lambda tensor: torch.empty(2, pin_memory=True),
    }
    with install_cuda(1, 2, RankClock()):
        modules = {name: move(torch.nn.Linear(2, 2)) for name, move in module_moves.items()}
        tensors = {name: move(torch.ones(2)) for name, move in tensor_moves.items()}
        device = (torch.device(1), isinstance(torch.device("cpu"), torch.device), isinstance(0, torch.device))
    assert {name: module.weight.device.type for name, module in modules.items()} == dict.fromkeys(
        module_moves, "cpu"
    )
    assert modules["to(1, torch.float64)"].weight.dtype == torch.float64
    assert {name: tensor.device.type for name, tensor in tensors.items()} == dict.fromkeys(
        tensor_moves, "cpu"
    )
    assert device == (torch.device("cuda", 1), True, False)


def test_a_refused_cuda_class_is_still_a_class_for_annotations() -> None:
    from timetravel.torch.rank.env.cuda_api import Unsupported

    with install_cuda(0, 2, RankClock()):
        annotation = torch.cuda.CUDAGraph | None  # transformers' Trainer module does this at import
        with pytest.raises(Unsupported, match=r"torch\.cuda\.CUDAGraph needs a real GPU"):
            torch.cuda.CUDAGraph()
        with pytest.raises(Unsupported, match=r"torch\.accelerator\.Graph needs a real GPU"):
            torch.accelerator.Graph()
    assert annotation is not None


# -- a 0-dim parameter (item 6) -------------------------------------------------------------------------

SCALAR_PARAMETER_REAL = [
    "step 0 slope 1.3561712503433228 intercept 0.15619036555290222",
    "step 1 slope 1.4562973976135254 intercept 0.21698619425296783",
    "step 2 slope 2.050813913345337 intercept 0.3812463581562042",
]
"""Rank 0's lines under real torchrun --standalone with gloo."""


def test_a_zero_dimensional_parameter_trains_as_under_real_torchrun() -> None:
    result = torchrun(SCRIPTS / "scalar_parameter.py")
    assert result.returncode == 0, result.stdout[-2000:]
    assert [line for line in rank_lines(result.stdout) if "slope" in line] == SCALAR_PARAMETER_REAL
    assert "optimizer_steps: 3" in result.stdout


# -- the nan detector counts only data that can reach a result (item 7) -----------------------------


def test_receive_buffers_made_with_torch_empty_feed_nothing() -> None:
    report = simulate(SCRIPTS / "receive_buffers.py", 2, "args=receive")
    assert report["outcome"] == "pass", report["failure"]


def test_a_nan_a_broadcast_s_root_sends_or_a_reduce_gets_is_still_found() -> None:
    root = simulate(SCRIPTS / "receive_buffers.py", 2, "args=root_nan")["failure"]
    reduced = simulate(SCRIPTS / "receive_buffers.py", 2, "args=reduce_nan")["failure"]
    assert (root["kind"], root["node"]) == ("nan", "r0") and "into broadcast" in root["message"]
    assert (reduced["kind"], reduced["node"]) == ("nan", "r1") and "into reduce" in reduced["message"]


# -- tied weights are recorded under every name state_dict gives them (item 10) -----------------------


def test_a_tied_weight_is_in_the_recorded_params_under_both_names() -> None:
    script = SCRIPTS / "tied_weights.py"
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", "nproc=2", "rank_output=quiet"])
    report, world = run_report(scenario, config, 0, launch=launch_naming([str(script)]))
    assert report["outcome"] == "pass", report["failure"]
    params = world.nodes["r0"]["params"]
    assert sorted(params) == ["lm_head.weight", "wte.weight"]
    assert params["lm_head.weight"].tobytes() == params["wte.weight"].tobytes()


# -- a run that never called a collective says so (item 12) -------------------------------------------


def test_a_run_with_no_collective_and_no_step_warns_that_it_was_never_distributed() -> None:
    report = simulate(SCRIPTS / "never_distributed.py")
    assert report["outcome"] == "pass"
    assert "no_collectives" in report["summary"]["warnings"]
    result = torchrun(SCRIPTS / "never_distributed.py")
    assert result.returncode == 0, result.stdout[-2000:]
    assert "no_collectives: no rank called a collective: is this script distributed?" in result.stdout
    assert (
        "no_collectives"
        not in simulate(SCRIPTS / "receive_buffers.py", 2, "args=receive")["summary"]["warnings"]
    )


# -- what real torch refuses, the simulator refuses, with torch's message (item 11) ---------------------

DDP_OF_A_CPU_MODULE = (
    "ValueError: DistributedDataParallel device_ids and output_device arguments only work with "
    "single-device/multiple-device GPU modules or CPU modules, but got device_ids [0], output_device None, "
    "and module parameters {device(type='cpu')}."
)
"""Real torchrun's message for DistributedDataParallel(nn.Linear(2, 2), device_ids=[0]) (rank 0)."""


def test_ddp_refuses_device_ids_for_a_module_never_put_on_cuda_as_torch_does() -> None:
    failure = simulate(SCRIPTS / "ddp_device_ids.py", 2, "args=cpu")["failure"]
    assert failure["kind"] == "exception"
    assert failure["message"].startswith(f"r0 raised {DDP_OF_A_CPU_MODULE} at ")


def test_ddp_takes_device_ids_for_a_module_put_on_cuda_every_way() -> None:
    result = torchrun(SCRIPTS / "ddp_device_ids.py", "placed")
    assert result.returncode == 0, result.stdout[-2000:]
    assert [line for line in rank_lines(result.stdout) if line.endswith("taken")] == [
        "to(index): taken",
        "cuda(): taken",
        "device=: taken",
        "with torch.device: taken",
        "meta, to_empty: taken",
    ]


def test_what_was_put_on_cuda_is_remembered_and_only_that() -> None:
    with install_cuda(0, 2, RankClock()) as installation:
        placements = installation.state.placements
        moved, kept = torch.ones(2).cuda(), torch.ones(2)
        with torch.device("cuda"):
            made = torch.zeros(2)
        after = torch.zeros(2)
        module = torch.nn.Linear(2, 2).to(0)
        answers = [placements.holds_tensor(tensor) for tensor in (moved, kept, made, after)]
        holds = (placements.holds_module(module), placements.holds_module(torch.nn.Linear(2, 2)))
    assert answers == [True, False, True, False]
    assert holds == (True, False)


# -- accelerate's debug-mode check raises its own exception (item 8) ----------------------------------


def test_accelerate_s_debug_mode_finds_a_shape_mismatch_with_its_own_exception() -> None:
    result = torchrun(SCRIPTS / "accelerate_debug_check.py")
    assert result.returncode == 0, result.stdout[-3000:]
    mismatch = (
        "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid."
    )
    assert [line for line in rank_lines(result.stdout) if "Exception" in line or "no exception" in line] == [
        f"gather: DistributedOperationException {mismatch}",
        "pad_across_processes: DistributedOperationException Error found while calling "
        "`accelerate.utils.operations.pad_across_processes`. Please see the earlier error for more details.",
        f"reduce: DistributedOperationException {mismatch}",
        f"broadcast: DistributedOperationException {mismatch}",
    ]


# -- the environment torchrun gives a rank (found beside item 1) --------------------------------------

TORCHRUN_ENVIRONMENT = {
    "GROUP_RANK": "0",
    "GROUP_WORLD_SIZE": "1",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "localhost",
    "OMP_NUM_THREADS": "1",
    "RANK": "1",
    "ROLE_NAME": "default",
    "ROLE_RANK": "1",
    "ROLE_WORLD_SIZE": "2",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "WORLD_SIZE": "2",
}
"""What real torchrun --standalone --nproc-per-node 2 gives rank 1 (MASTER_PORT, TORCHELASTIC_RUN_ID and
TORCHELASTIC_ERROR_FILE vary from run to run)."""


def test_a_rank_gets_the_environment_torchrun_gives_it() -> None:
    from timetravel.torch.world.specs import rank_specs

    config = get_scenario("torch").resolve_config(["script=x.py", "nproc=2"])
    environment = rank_specs(config, 0, 0, cwd="/tmp", script=None)[1]["env"]
    assert {key: environment.get(key) for key in TORCHRUN_ENVIRONMENT} == TORCHRUN_ENVIRONMENT
    assert {"MASTER_PORT", "TORCHELASTIC_RUN_ID"} <= set(environment)
