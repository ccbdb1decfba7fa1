"""FSDP2 built on the meta device whose ``init_weights`` forgets the blocks (uninitialised after ``to_empty``).

    timetravel torchrun --nproc-per-node 2 tests/torch_scripts/fsdp2_uninit_blocks.py
    timetravel torchrun --nproc-per-node 2 tests/torch_scripts/fsdp2_uninit_blocks.py --fixed   # passes

The classic meta-device bug: the model is created on ``meta``, sharded with ``fully_shard``, given
memory by ``to_empty`` and then initialised by the model's own ``init_weights`` — which initialises
the input projection and the head and skips ``blocks``, so every block's parameters hold whatever
``to_empty`` left in memory (NaN under deterministic algorithms, garbage on a GPU).
"""

import argparse

import torch
import torch.distributed as dist
from _script_common import train_step
from torch.distributed.fsdp import fully_shard


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(width, 2 * width)
        self.fc2 = torch.nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


class Model(torch.nn.Module):
    def __init__(self, width: int = 16, depth: int = 2) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(8, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def init_weights(self, fixed: bool) -> None:
        with torch.no_grad():
            for layer in (self.embed, self.head):
                torch.nn.init.normal_(layer.weight, std=0.02)
                torch.nn.init.zeros_(layer.bias)
            if fixed:  # the planted bug: without --fixed the blocks are never initialised
                for block in self.blocks:
                    for layer in (block.fc1, block.fc2):
                        torch.nn.init.normal_(layer.weight, std=0.02)
                        torch.nn.init.zeros_(layer.bias)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Model()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    model.to_empty(device="cpu")
    model.init_weights(args.fixed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        loss = train_step(model, optimizer, torch.randn(4, 8, generator=data))
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
