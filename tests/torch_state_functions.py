"""Rank functions for the training-state tests (module level: each rank imports them)."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def ddp_sgd() -> dict:
    """DDP on different data per rank, SGD with momentum, a BatchNorm buffer; 3 steps.

    Returns the final state_dict, the momentum buffers and the (averaged) gradients of the last step."""
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(10 + dist.get_rank())
    for _ in range(3):
        inputs = torch.randn(6, 4, generator=data)
        loss = ddp(inputs).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        dist.all_reduce(loss.detach().clone())
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    return {
        "state_dict": {name: value.tolist() for name, value in model.state_dict().items()},
        "momentum": {
            names[id(parameter)]: optimizer.state[parameter]["momentum_buffer"].tolist()
            for parameter in model.parameters()
        },
        "reduced_grads": {name: parameter.grad.tolist() for name, parameter in model.named_parameters()},
    }


def fsdp2_adam() -> dict:
    """FSDP2 (fully_shard per layer and the root), Adam, 2 steps; returns the logical parameters."""
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(2):
        loss = model(torch.randn(4, 4, generator=data)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {name: parameter.full_tensor().tolist() for name, parameter in model.named_parameters()}


def grad_scaler_with_an_inf() -> None:
    """A GradScaler on the CPU; at step 1 rank 0's gradient holds an inf, so that step is skipped."""
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for step in range(3):
        inputs = torch.ones(2, 4)
        if step == 1 and dist.get_rank() == 0:
            inputs[0, 0] = float("inf")
        loss = model(inputs).sum()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def two_param_groups() -> None:
    """Adam over two param groups with their own learning rates, 2 steps, no DDP."""
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    groups = [{"params": model[0].parameters(), "lr": 0.01}, {"params": model[1].parameters(), "lr": 0.002}]
    optimizer = torch.optim.Adam(groups)
    for _ in range(2):
        loss = model(torch.ones(2, 3)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
