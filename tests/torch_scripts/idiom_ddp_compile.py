"""Idiom: DDP around a ``torch.compile``d model (the eager backend: no compiler needed), as trainers
that compile their model write it; prints the loss of each step."""

import torch
import torch.distributed as dist
from _script_common import train_step
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank = dist.get_rank()
device = torch.device(f"cuda:{rank}" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)).to(device)
model = DDP(torch.compile(model, backend="eager"), device_ids=[rank] if device.type == "cuda" else None)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data = torch.Generator().manual_seed(rank)
for step in range(5):
    loss = train_step(model, optimizer, torch.randn(16, 8, generator=data).to(device))
    print(f"step {step} loss {loss.item()!r}")
dist.destroy_process_group()
