"""The shape of the PyTorch DDP tutorial's non-torchrun scripts: the script spawns its own ranks.

``python spawn_ddp.py STEPS`` spawns one process per GPU (``torch.cuda.device_count()``; two on a
CPU-only host), each of which sets MASTER_ADDR/MASTER_PORT, joins the group with its own rank and
world size, trains a DDP model and checks that the replicas agree. Under ``timetravel python`` each
spawned process is a simulated rank.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size)


def train(rank: int, world_size: int, steps: int) -> None:
    setup(rank, world_size)
    device = rank if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(device)
    ddp = DDP(model, device_ids=[rank] if torch.cuda.is_available() else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(rank)
    for step in range(steps):
        loss = ddp(torch.randn(8, 4, generator=data).to(device)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"rank {rank} step {step} loss {loss.item():.6f}")
    weights = [torch.zeros(1) for _ in range(world_size)]
    dist.all_gather(weights, model.weight.detach().sum().reshape(1).cpu())
    assert all(torch.equal(weights[0], other) for other in weights), weights
    dist.destroy_process_group()


if __name__ == "__main__":
    assert "RANK" not in os.environ  # a plain `python SCRIPT`: no launcher set a rank
    world_size = torch.cuda.device_count() if torch.cuda.is_available() else 2
    mp.spawn(train, args=(world_size, int(sys.argv[1])), nprocs=world_size)
