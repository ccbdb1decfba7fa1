"""A data-parallel MLP trained with DistributedDataParallel: an ordinary torchrun script.

    torchrun --standalone --nproc-per-node 4 docs/examples/torch/ddp_mlp.py --steps 20
    timetravel torchrun --nproc-per-node 4 docs/examples/torch/ddp_mlp.py --steps 20

Planted bugs (--bug): ``skip_collective`` — rank 1 skips the all_reduce of its loss at step 5 (a hang);
``nan_data`` — rank 2's batch at step 7 holds a NaN (found at the first collective it feeds).
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bug", choices=("none", "skip_collective", "nan_data"), default="none")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(1000 + rank)
    for step in range(args.steps):
        inputs = torch.randn(8, 16, generator=data)
        targets = inputs.sum(dim=1, keepdim=True).sin()
        if args.bug == "nan_data" and rank == 2 and step == 7:
            inputs[0, 0] = float("nan")
        loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        report = loss.detach().clone()
        if not (args.bug == "skip_collective" and rank == 1 and step == 5):
            dist.all_reduce(report)
        if rank == 0 and step % 5 == 0:
            print(f"step {step} loss {report.item() / world:.6f}")
    if rank == 0:
        print(f"final loss {report.item() / world:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
