"""A regression model with 0-dimensional parameters (nn.Parameter(torch.tensor(1.0))), under DDP: the
simulator's step hook must digest them like any other parameter, and the script train as under torchrun."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class Line(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.slope = torch.nn.Parameter(torch.tensor(1.0))
        self.intercept = torch.nn.Parameter(torch.tensor(0.0))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.slope * inputs + self.intercept


dist.init_process_group("gloo")
model = DistributedDataParallel(Line())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(dist.get_rank())
for step in range(3):
    inputs = torch.randn(8, generator=generator)
    loss = ((model(inputs) - (3 * inputs + 1)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(
        f"step {step} slope {model.module.slope.item()!r} intercept {model.module.intercept.item()!r}",
        flush=True,
    )
dist.destroy_process_group()
