"""FSDP2 (fully_shard per layer and the root), Adam, and a functional collective, on 2 ranks."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from _script_common import sharded_mlp, train_step

dist.init_process_group("gloo")
model = sharded_mlp()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(dist.get_rank())
for step in range(3):
    loss = train_step(model, opt, torch.randn(4, 8, generator=g))
    print("step", step, loss.item())
total = fc.all_reduce(torch.ones(2), "sum", dist.group.WORLD)
assert torch.equal(total, torch.full((2,), float(dist.get_world_size()))), total
print("final loss", loss.item())
