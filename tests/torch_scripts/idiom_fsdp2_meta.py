"""Idiom: FSDP2 as large-model trainers write it — the model built on the meta device, sharded with
``fully_shard`` over a mesh from ``init_device_mesh`` (no ``init_process_group`` of its own), given
memory with ``to_empty`` and initialised in place, trained, saved with DCP, trained on, loaded back.

Runs on GPUs (``cuda``) and on a CPU-only host (``cpu``, gloo); prints the loss of each step.
"""

import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Model(torch.nn.Module):
    def __init__(self, width: int = 16, depth: int = 2) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def init_weights(self) -> None:
        """Every parameter, in place: to_empty leaves memory uninitialised."""
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
                if name.endswith("norm.weight"):
                    local.fill_(1.0)
                elif name.endswith("bias"):
                    local.zero_()
                else:
                    values = torch.randn(local.shape, generator=generator) * 0.1
                    local.copy_(values.to(local.device))


device_type = "cuda" if torch.cuda.is_available() else "cpu"
mesh = init_device_mesh(device_type, (int(os.environ["WORLD_SIZE"]),))
rank = dist.get_rank()
with torch.device("meta"):
    model = Model()
assert all(parameter.is_meta for parameter in model.parameters())
for block in model.blocks:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
model.to_empty(device=device_type)
model.init_weights()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
data = torch.Generator().manual_seed(100 + rank)


def train(steps: int) -> None:
    for _ in range(steps):
        x = torch.randn(8, 16, generator=data).to(device_type)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item()!r}")


def local(value: torch.Tensor) -> torch.Tensor:
    return (value.to_local() if hasattr(value, "to_local") else value).detach().clone()


train(3)
model_state, optimizer_state = get_state_dict(model, optimizer)
saved = {name: local(value) for name, value in model_state.items()}
dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id="checkpoint")
train(2)
model_state, optimizer_state = get_state_dict(model, optimizer)
state = {"model": model_state, "optimizer": optimizer_state}
dcp.load(state, checkpoint_id="checkpoint")
set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
for name, value in get_state_dict(model, optimizer)[0].items():
    assert torch.equal(local(value), saved[name]), f"{name} after dcp.load differs from the saved one"
train(2)
dist.destroy_process_group()
