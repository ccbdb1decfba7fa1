"""FSDP2 (fully_shard per layer and the root), Adam, and a functional collective, on 2 ranks."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(dist.get_rank())
for step in range(3):
    x = torch.randn(4, 8, generator=g)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, loss.item())
total = fc.all_reduce(torch.ones(2), "sum", dist.group.WORLD)
assert torch.equal(total, torch.full((2,), float(dist.get_world_size()))), total
print("final loss", loss.item())
