"""torch.distributed.checkpoint save and load under the simulator, of a DDP model and of FSDP2.

Each state dict is saved with ``dcp.save`` into the rank's working directory, the live tensors are
then overwritten, and ``dcp.load`` must bring back the saved values exactly (asserted per tensor, on
every rank); the FSDP2 part goes through ``get_state_dict``/``set_state_dict`` as a trainer would.
"""

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from _script_common import sharded_mlp, train_step
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    generator = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        train_step(model, optimizer, torch.randn(4, 8, generator=generator))


def local(value: torch.Tensor) -> torch.Tensor:
    return value.to_local() if hasattr(value, "to_local") else value


torch.manual_seed(0)
ddp = DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
)
train(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1), 2)
saved = {name: value.clone() for name, value in ddp.state_dict().items()}
dcp.save({"model": ddp.state_dict()}, checkpoint_id="checkpoint_ddp")
with torch.no_grad():
    for parameter in ddp.parameters():
        parameter.fill_(7.0)
state = {"model": ddp.state_dict()}
dcp.load(state, checkpoint_id="checkpoint_ddp")
ddp.load_state_dict(state["model"])
for name, value in ddp.state_dict().items():
    assert torch.equal(value, saved[name]), f"DDP {name} after dcp.load: {value} != {saved[name]}"
print(f"rank {rank}: DDP state dict restored by dcp.load ({len(saved)} tensors)")

model = sharded_mlp()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
train(model, optimizer, 2)
model_state, optimizer_state = get_state_dict(model, optimizer)
saved_model = {name: local(value).clone() for name, value in model_state.items()}
saved_moments = {
    (name, key): local(value).clone()
    for name, entries in optimizer_state["state"].items()
    for key, value in entries.items()
    if isinstance(value, torch.Tensor)
}
dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id="checkpoint_fsdp2")
train(model, optimizer, 1)  # the live state moves on: the load must bring back the saved one
model_state, optimizer_state = get_state_dict(model, optimizer)
state = {"model": model_state, "optimizer": optimizer_state}
dcp.load(state, checkpoint_id="checkpoint_fsdp2")
set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
model_state, optimizer_state = get_state_dict(model, optimizer)
for name, value in model_state.items():
    assert torch.equal(local(value), saved_model[name]), f"FSDP2 {name} after dcp.load differs"
for (name, key), value in saved_moments.items():
    assert torch.equal(local(optimizer_state["state"][name][key]), value), f"Adam {key} of {name} differs"
assert len(saved_moments) == 3 * len(saved_model)  # step, exp_avg, exp_avg_sq per parameter
print(
    f"rank {rank}: FSDP2 model and Adam state restored by dcp.load ({len(saved_moments)} optimizer tensors)"
)
