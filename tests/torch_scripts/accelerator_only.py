"""A script written for torch >= 2.6: it asks torch.accelerator, never torch.cuda, and takes its
no-GPU branch when the answer is no (as the PyTorch examples do). Under the CUDA mapping it must train."""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

if not torch.accelerator.is_available() or torch.accelerator.device_count() < 2:
    print("Unable to locate sufficient 2 gpus; exiting", flush=True)
    sys.exit(0)
local_rank = int(os.environ["LOCAL_RANK"])
device = torch.accelerator.current_accelerator()
assert device is not None and device.type == "cuda", device
torch.accelerator.set_device_index(local_rank)
assert torch.accelerator.current_device_index() == local_rank
dist.init_process_group(backend=dist.get_default_backend_for_device(device), device_id=local_rank)
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 1).to(device), device_ids=[local_rank])
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)  # its step asks the accelerator's stream
double = torch.compile(lambda tensor: tensor * 2, backend="eager")  # dynamo meets the accelerator API
generator = torch.Generator().manual_seed(dist.get_rank())
for step in range(3):
    inputs = torch.randn(16, 8, generator=generator).to(device, non_blocking=True)
    loss = model(double(inputs)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    torch.accelerator.synchronize()
    print(f"step {step} loss {loss.item():.6f}", flush=True)
with torch.accelerator.device_index(0):
    assert torch.accelerator.current_device_index() == 0
assert torch.accelerator.current_device_index() == local_rank
assert torch.accelerator.memory_allocated() == 0 and not torch.accelerator.current_stream().is_capturing()
dist.destroy_process_group()
