"""Idiom: automatic mixed precision — ``torch.autocast`` (bfloat16) around the forward pass and a
``GradScaler`` (enabled on GPUs), with DDP; prints the loss of each step."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank = dist.get_rank()
device_type = "cuda" if torch.cuda.is_available() else "cpu"
device = torch.device(f"cuda:{rank}" if device_type == "cuda" else "cpu")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)).to(device)
model = DDP(model, device_ids=[rank] if device_type == "cuda" else None)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler(device_type, enabled=device_type == "cuda")
data = torch.Generator().manual_seed(rank)
for step in range(5):
    x = torch.randn(32, 16, generator=data).to(device)
    with torch.autocast(device_type, dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print(f"step {step} loss {loss.item()!r}")
dist.destroy_process_group()
