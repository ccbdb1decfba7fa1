"""Idiom: a model with 0-dimensional parameters (``nn.Parameter(torch.tensor(1.0))``), the small
regression models of library test suites, trained with DDP; prints the loss and the parameters."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Regression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(0.0))
        self.b = torch.nn.Parameter(torch.tensor(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.a + self.b


dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(Regression())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.Generator().manual_seed(rank)
for step in range(6):
    x = torch.randn(16, generator=data)
    loss = (model(x) - (2 * x + 3)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item()!r} a {model.module.a.item()!r} b {model.module.b.item()!r}")
dist.destroy_process_group()
