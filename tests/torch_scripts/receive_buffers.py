"""Receive buffers made with torch.empty (NaN under deterministic algorithms) on the ranks that only
receive. argv[1]: ``receive`` (broadcast, scatter, all_gather and all_to_all into empty buffers: no data
of theirs reaches a result, so nothing is fed), ``root_nan`` (the broadcast's root sends a NaN: fed,
by the root), ``reduce_nan`` (a non-root's NaN in a reduce: every input counts)."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mode = sys.argv[1]
if mode == "receive":
    buffer = torch.arange(16, dtype=torch.float32) if rank == 0 else torch.empty(16)
    dist.broadcast(buffer, src=0)
    assert buffer.tolist() == list(range(16)), buffer
    piece = torch.empty(4)
    dist.scatter(piece, [torch.full((4,), float(i)) for i in range(world)] if rank == 0 else None, src=0)
    assert piece.tolist() == [float(rank)] * 4, piece
    gathered = [torch.empty(3) for _ in range(world)]
    dist.all_gather(gathered, torch.full((3,), float(rank)))
    assert [part[0].item() for part in gathered] == [float(i) for i in range(world)]
    exchanged = torch.empty(world)
    dist.all_to_all_single(exchanged, torch.full((world,), float(rank)))
    assert exchanged.tolist() == [float(i) for i in range(world)], exchanged
elif mode == "root_nan":
    buffer = torch.full((4,), float("nan")) if rank == 0 else torch.zeros(4)
    dist.broadcast(buffer, src=0)
elif mode == "reduce_nan":
    value = torch.ones(3) if rank == 0 else torch.full((3,), float("nan"))
    dist.reduce(value, dst=0)
print(f"rank {rank} {mode} done", flush=True)
