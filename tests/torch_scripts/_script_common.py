"""What several scripts here share: the seeded FSDP2 MLP and one training step on a squared-output loss.

A script imports it by name (``from _script_common import …``): python, real ``torchrun`` and
``timetravel torchrun`` all put the script's own folder first on ``sys.path``.
"""

import torch


def sharded_mlp(inputs: int = 8, hidden: int = 16, outputs: int = 1) -> torch.nn.Sequential:
    """Linear-ReLU-Linear seeded with 0, ``fully_shard`` on each Linear and then on the root (FSDP2)."""
    from torch.distributed.fsdp import fully_shard  # only the FSDP2 scripts load it

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(inputs, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, outputs)
    )
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def train_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor
) -> torch.Tensor:
    """One step on the loss ``mean(model(inputs) ** 2)``; returns that loss."""
    loss = model(inputs).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss
