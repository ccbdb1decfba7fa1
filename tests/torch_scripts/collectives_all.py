"""Every collective with torch's semantics, checked by the rank itself against the exact expected values."""

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()


def check(name, got, expected):
    assert torch.equal(got, expected), f"{name}: got {got.tolist()} expected {expected.tolist()}"


ranks = torch.arange(world, dtype=torch.float32)
for op, expected in (
    (dist.ReduceOp.SUM, ranks.sum() + world),
    (dist.ReduceOp.MAX, ranks.max() + 1),
    (dist.ReduceOp.MIN, ranks.min() + 1),
    (dist.ReduceOp.PRODUCT, (ranks + 1).prod()),
    (dist.ReduceOp.AVG, (ranks + 1).mean()),
):
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value, op=op)
    check(f"all_reduce {op}", value, expected.reshape(1))
bits = torch.tensor([1 << rank], dtype=torch.int64)
dist.all_reduce(bits, op=dist.ReduceOp.BOR)
check("bor", bits, torch.tensor([(1 << world) - 1]))
value = torch.tensor([float(rank)])
dist.broadcast(value, src=world - 1)
check("broadcast", value, torch.tensor([world - 1.0]))
gathered = [torch.zeros(2) for _ in range(world)]
dist.all_gather(gathered, torch.tensor([rank, -rank], dtype=torch.float32))
check(
    "all_gather",
    torch.stack(gathered),
    torch.stack([torch.tensor([r, -r], dtype=torch.float32) for r in range(world)]),
)
into = torch.zeros(world * 2)
dist.all_gather_into_tensor(into, torch.tensor([rank, rank], dtype=torch.float32))
check("all_gather_into_tensor", into, ranks.repeat_interleave(2))
scattered = torch.zeros(1)
dist.reduce_scatter_tensor(scattered, torch.arange(world, dtype=torch.float32) * (rank + 1))
check(
    "reduce_scatter_tensor",
    scattered,
    torch.tensor([rank * sum(r + 1 for r in range(world))], dtype=torch.float32),
)
output = torch.zeros(world)
dist.all_to_all_single(output, torch.full((world,), float(rank)))
check("all_to_all_single", output, ranks)
value = torch.tensor([rank + 1.0])
dist.reduce(value, dst=0)
if rank == 0:
    check("reduce", value, torch.tensor([world * (world + 1) / 2]))
gather_list = [torch.zeros(1) for _ in range(world)] if rank == 0 else None
dist.gather(torch.tensor([float(rank)]), gather_list, dst=0)
if rank == 0:
    check("gather", torch.cat(gather_list), ranks)
received = torch.zeros(1)
dist.scatter(received, [torch.tensor([r * 10.0]) for r in range(world)] if rank == 0 else None, src=0)
check("scatter", received, torch.tensor([rank * 10.0]))
objects = [None] * world
dist.all_gather_object(objects, {"rank": rank})
assert objects == [{"rank": r} for r in range(world)], objects
work = dist.all_reduce(torch.ones(3), async_op=True)
work.wait()
evens = dist.new_group([r for r in range(world) if r % 2 == 0])
if rank % 2 == 0:
    value = torch.tensor([1.0])
    dist.all_reduce(value, group=evens)
    check("new_group", value, torch.tensor([float((world + 1) // 2)]))
# irecv posted before isend: non-blocking ops return at once
peer = rank ^ 1
if peer < world:
    incoming = torch.zeros(2)
    request = dist.irecv(incoming, src=peer)
    send = dist.isend(torch.tensor([rank, 7.0]), dst=peer)
    request.wait()
    send.wait()
    check("irecv/isend", incoming, torch.tensor([float(peer), 7.0]))
dist.barrier()
print(f"all collectives ok on rank {rank}")
dist.destroy_process_group()
