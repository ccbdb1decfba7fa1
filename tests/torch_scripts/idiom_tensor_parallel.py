"""Idiom: tensor parallelism on a 1-D mesh — ``parallelize_module`` with ``ColwiseParallel`` for the
first projection and ``RowwiseParallel`` for the second (the Megatron MLP split), the mesh from
``init_device_mesh`` (no ``init_process_group`` of its own). Every rank feeds the same batch, as TP
requires; prints the loss of each step.
"""

import os

import torch
import torch.distributed as dist
from _script_common import train_step
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class FeedForward(torch.nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.w1 = torch.nn.Linear(width, 4 * width)
        self.w2 = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(torch.relu(self.w1(x)))


device_type = "cuda" if torch.cuda.is_available() else "cpu"
mesh = init_device_mesh(device_type, (int(os.environ["WORLD_SIZE"]),))
torch.manual_seed(0)
model = FeedForward().to(device_type)
model = parallelize_module(model, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(7)  # the same batches on every rank
for step in range(5):
    loss = train_step(model, optimizer, torch.randn(8, 16, generator=data).to(device_type))
    print(f"step {step} loss {loss.item()!r}")
assert dist.get_world_size() == int(os.environ["WORLD_SIZE"])
dist.destroy_process_group()
