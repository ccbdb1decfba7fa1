"""Idiom: a map-style dataset read through ``DataLoader(num_workers=2)`` with a ``DistributedSampler``
(shuffled, ``set_epoch`` each epoch), feeding DDP; prints the loss of each step."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
features = torch.randn(96, 8)
dataset = TensorDataset(features, features.sum(dim=1, keepdim=True))
sampler = DistributedSampler(dataset, shuffle=True, seed=5)
loader = DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2)
model = DDP(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch} loss {loss.item()!r}")
dist.destroy_process_group()
