"""CUDA on CPU inside a rank: a script written for GPUs runs unchanged, on CPU tensors."""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

from timetravel.torch.rank.env.clock import RankClock
from timetravel.torch.rank.env.cuda import install_cuda
from timetravel.torch.rank.env.cuda_api import Unsupported
from timetravel.torch.rank.env.cuda_devices import factory_names

MAPPINGS = ("patch", "mode")


@pytest.fixture
def clock() -> RankClock:
    return RankClock()


@pytest.fixture
def cuda(clock: RankClock) -> Iterator[Any]:
    with install_cuda(1, 4, clock) as installation:
        yield installation.state


def gpu_style_training(device_name: str, steps: int = 6) -> list[float]:
    """A training loop as people write it for GPUs: cuda:N, autocast, GradScaler, Events."""
    local_rank = 1
    use_cuda = device_name == "cuda"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device(device_name, local_rank) if use_cuda else torch.device("cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler(device_name)
    inputs = torch.randn(64, 8, device=device)
    targets = torch.randn(64, 1).cuda(local_rank) if use_cuda else torch.randn(64, 1)
    losses = []
    for _ in range(steps):
        with torch.autocast(device_name, dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(inputs.to(device, non_blocking=True)).float(), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("device_mapping", MAPPINGS)
def test_a_gpu_training_loop_gives_the_cpu_loop_bits(clock: RankClock, device_mapping: str) -> None:
    torch.manual_seed(0)
    expected = gpu_style_training("cpu")
    with install_cuda(1, 2, clock, device_mapping=device_mapping):
        losses = gpu_style_training("cuda")
    assert losses == expected
    assert losses[-1] < losses[0]


def test_the_cuda_api_reports_the_local_world(cuda: Any) -> None:
    assert torch.cuda.is_available()
    assert torch.cuda.device_count() == 4
    assert torch.cuda.current_device() == 0  # as on a GPU node until the script picks its device
    torch.cuda.set_device(torch.device("cuda", 3))
    assert torch.cuda.current_device() == 3
    with torch.cuda.device(2):
        assert torch.cuda.current_device() == 2
    assert torch.cuda.current_device() == 3
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.cuda.set_device(4)
    assert torch.cuda.get_device_capability() == (8, 0)
    assert torch.cuda.get_device_properties(0).total_memory == 80 << 30
    assert "simulated" in torch.cuda.get_device_name()
    assert torch.cuda.is_bf16_supported()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.memory_allocated() == torch.cuda.max_memory_reserved() == 0
    assert torch.cuda.memory_stats()["allocated_bytes.all.peak"] == 0
    with torch.cuda.nvtx.range("forward"):
        torch.cuda.nvtx.range_push("inner")
        torch.cuda.nvtx.range_pop()


def test_factory_functions_and_moves_accept_cuda_devices(cuda: Any) -> None:
    for device in ("cuda", "cuda:1", torch.device("cuda", 2), 0):
        assert torch.zeros(2, device=device).device.type == "cpu"
    assert torch.arange(3, device="cuda").tolist() == [0, 1, 2]
    assert torch.nn.Linear(2, 2, device="cuda").weight.device.type == "cpu"
    tensor = torch.ones(2)
    assert tensor.new_zeros(3, device="cuda:0").tolist() == [0.0, 0.0, 0.0]
    assert tensor.to("cuda:3", torch.float64).dtype == torch.float64
    assert tensor.type("torch.cuda.HalfTensor").dtype == torch.float16
    assert tensor.pin_memory() is not tensor
    assert {
        "zeros",
        "ones",
        "empty",
        "randn",
        "rand",
        "randint",
        "arange",
        "full",
        "tensor",
        "linspace",
    } <= set(factory_names())


def test_moves_copy_as_between_host_and_gpu(cuda: Any) -> None:
    host = torch.zeros(3)
    on_gpu = host.cuda()
    on_gpu.add_(1)
    assert host.tolist() == [0.0, 0.0, 0.0]
    assert not torch.randn(2, requires_grad=True).to("cuda").is_leaf  # the classic GPU gotcha, kept
    parameter = torch.nn.Parameter(torch.ones(2))
    snapshot = parameter.detach().cpu()
    with torch.no_grad():
        parameter.mul_(3)
    assert snapshot.tolist() == [1.0, 1.0]
    assert host.to("cpu") is host  # torch's own meaning where the script names the CPU


def test_modules_move_to_cuda_and_keep_their_parameters(cuda: Any) -> None:
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    weight = model.weight
    model.cuda()
    model.to("cuda:1")
    assert model.weight is weight
    model(torch.randn(4, 3, device="cuda")).sum().backward()
    optimizer.step()


def test_event_elapsed_time_is_logical_time_in_ms(cuda: Any, clock: RankClock) -> None:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    clock.advance(2_500_000)
    end.record(torch.cuda.current_stream())
    end.synchronize()
    assert start.elapsed_time(end) == 2.5
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.cuda.Event().elapsed_time(end)
    with pytest.raises(RuntimeError, match="recorded"):
        torch.cuda.Event(enable_timing=True).elapsed_time(end)


def test_streams_switch_and_wait(cuda: Any) -> None:
    torch.cuda.set_device(1)
    side = torch.cuda.Stream()
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() == side
        result = torch.ones(2, device="cuda") * 2
        result.record_stream(side)
    assert torch.cuda.current_stream() != side
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.current_stream().wait_event(side.record_event())
    assert side.query() and result.tolist() == [2.0, 2.0]


def test_cuda_seeds_and_rng_states_round_trip(cuda: Any) -> None:
    torch.manual_seed(42)
    assert torch.cuda.initial_seed() == 42
    torch.cuda.manual_seed(7)
    state = torch.cuda.get_rng_state()
    torch.cuda.manual_seed_all(8)
    torch.cuda.set_rng_state(state)
    assert torch.equal(torch.cuda.get_rng_state(), state)
    assert len(torch.cuda.get_rng_state_all()) == 4
    with torch.random.fork_rng(devices=[1], device_type="cuda"):
        torch.randn(2, device="cuda")


def test_autocast_cuda_is_cpu_autocast_with_cudas_dtype(cuda: Any) -> None:
    a = torch.randn(4, 4, device="cuda")
    with torch.autocast("cuda"):
        assert (a @ a).dtype == torch.float16
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.bfloat16
    with torch.autocast(device_type="cuda", enabled=False):
        assert (a @ a).dtype == torch.float32
    assert torch.cuda.amp.GradScaler().is_enabled()


def test_gpu_only_packages_and_features_are_refused_by_name(cuda: Any) -> None:
    for name in ("flash_attn", "apex", "transformer_engine", "triton"):
        with pytest.raises(ImportError, match=f"unsupported: {name} needs a real GPU"):
            importlib.import_module(name)
        assert importlib.util.find_spec(name) is None  # torch's own probes see "not installed"
    with pytest.raises(ImportError, match="unsupported: flash_attn needs a real GPU"):
        importlib.import_module("flash_attn.flash_attn_interface")
    with pytest.raises(Unsupported, match=r"unsupported: torch\.cuda\.CUDAGraph needs a real GPU"):
        torch.cuda.CUDAGraph()
    with pytest.raises(Unsupported, match=r"torch\.cuda\.graph "):
        torch.cuda.graph(None)


def test_a_cuda_generator_is_a_cpu_generator(cuda: Any) -> None:
    generator = torch.Generator(device="cuda").manual_seed(3)
    assert isinstance(generator, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
    expected = torch.randn(2, generator=torch._C.Generator().manual_seed(3))
    assert torch.equal(torch.randn(2, generator=generator, device="cuda"), expected)


def test_fsdp2_on_a_cuda_mesh_with_a_bound_device(cuda: Any) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.cuda.set_device(0)
    dist.init_process_group(
        "gloo", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda", 0)
    )
    try:
        mesh = init_device_mesh("cuda", (1,))
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)).cuda()
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.randn(2, 4, device="cuda")).sum().backward()
        optimizer.step()
        dist.barrier(device_ids=[0])
    finally:
        dist.destroy_process_group()


def test_ddp_with_device_ids_and_a_cuda_checkpoint_load(cuda: Any) -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.cuda.set_device(1)
        model = torch.nn.Linear(4, 2).to(torch.device("cuda", 1))
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[1], output_device=1)
        ddp(torch.randn(3, 4, device="cuda:1")).sum().backward()
        assert model.weight.grad is not None
    finally:
        dist.destroy_process_group()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    assert set(torch.load(buffer, map_location="cuda:1")) == {"weight", "bias"}
    buffer.seek(0)
    assert set(torch.load(buffer, map_location={"cuda:0": "cuda:1"})) == {"weight", "bias"}


def test_compile_and_torchscript_still_work(cuda: Any) -> None:
    def moves(a: torch.Tensor) -> torch.Tensor:
        doubled = a.to("cuda") * 2
        return (doubled.cuda() + torch.ones(3, device=torch.device("cuda", 0))).sum().cpu()

    compiled = torch.compile(moves, backend="eager")
    assert compiled(torch.ones(3)).tolist() == 9.0

    @torch.jit.script
    def scripted(a: torch.Tensor) -> torch.Tensor:
        return a + torch.zeros(3)

    assert scripted(torch.ones(3)).tolist() == [1.0, 1.0, 1.0]


def test_uninstall_gives_torch_back(clock: RankClock) -> None:
    zeros, to = torch.zeros, torch.Tensor.to
    with install_cuda(0, 1, clock):
        assert torch.zeros is not zeros
    assert torch.zeros is zeros and torch.Tensor.to is to
    assert not torch.cuda.is_available()
    with pytest.raises(ValueError, match="device_mapping"):
        install_cuda(0, 1, clock, device_mapping="magic")
    assert not torch.cuda.is_available()
