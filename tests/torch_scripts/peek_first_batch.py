"""pytorch/examples' DDP tutorial's habit: each epoch, ``next(iter(loader))`` reads a batch only for its
size — before ``set_epoch``, so from the previous epoch's order — then the epoch iterates the loader from
its start. That batch equals the rank's first batch and is never trained on: no duplicate batch
(set_epoch is called every epoch)."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=8, shuffle=False, sampler=sampler)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    batch_size = len(next(iter(loader))[0])
    sampler.set_epoch(epoch)
    for inputs, targets in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(f"epoch {epoch} batch size {batch_size}")
dist.destroy_process_group()
