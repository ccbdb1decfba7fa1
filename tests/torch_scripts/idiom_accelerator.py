"""Idiom: a script written against ``torch.accelerator`` only (torch >= 2.6), never naming CUDA: the
device and the backend come from the current accelerator, or the CPU and gloo without one."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
backend = dist.get_default_backend_for_device(device)
dist.init_process_group(backend)
rank = dist.get_rank()
if device.type != "cpu":
    torch.accelerator.set_device_index(rank % torch.accelerator.device_count())
    device = torch.device(device.type, torch.accelerator.current_device_index())
print(f"device {device} backend {backend} accelerators {torch.accelerator.device_count()}")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1).to(device), device_ids=[device.index] if device.type != "cpu" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.Generator().manual_seed(rank)
for step in range(4):
    loss = model(torch.randn(8, 8, generator=data).to(device)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if device.type != "cpu":
        torch.accelerator.synchronize()
    print(f"step {step} loss {loss.item()!r}")
dist.destroy_process_group()
