"""A NaN that only ranks 0 and 1 feed, whatever the world size (minimize shrinks the job to 2 ranks).

    timetravel torchrun --nproc-per-node 4 tests/torch_scripts/nan_two_ranks.py

DDP over a small MLP, each rank on its own seeded batches; at step ``--nan-step`` (0-based) ranks 0
and 1 put a NaN in their batch, so DDP's gradient all_reduce of that step gets non-finite values
from r0 and r1 and from no other rank. Nothing depends on the world size but the data each rank
draws, so 2 ranks fail the same way at the same step and tensor as 4.
"""

import argparse

import torch
import torch.distributed as dist
from _script_common import train_step
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--nan-step", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(args.steps):
        inputs = torch.randn(4, 8, generator=data)
        if step == args.nan_step and rank in (0, 1):
            inputs[0, 0] = float("nan")
        loss = train_step(model, optimizer, inputs)
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
