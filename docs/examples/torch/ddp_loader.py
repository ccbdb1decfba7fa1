"""ddp_mlp.py with its batches from a DataLoader and a DistributedSampler, the way most scripts load data.

    torchrun --standalone --nproc-per-node 3 docs/examples/torch/ddp_loader.py --steps 9
    timetravel torchrun --nproc-per-node 3 docs/examples/torch/ddp_loader.py --steps 9 --bug nan_data

Planted bugs (--bug): ``nan_data`` — rank 2's batch at step 7 (``--nan-step``) holds a NaN, as in ddp_mlp.py.
Here the batch comes from a sampler, so ``timetravel explain`` names the sampler indices of that step's
batch (the samples to look at) besides the rank, the step and the first module whose output went
non-finite. ``no_sampler`` — a shuffling DataLoader without a DistributedSampler: every rank trains on the
same batches (real torch says nothing; timetravel warns ``duplicate_batches``). ``no_set_epoch`` — the
DistributedSampler's ``set_epoch`` is never called: every epoch repeats the first one's order.
"""

import argparse
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SAMPLES = 256
BATCH = 8


def batches(bug: str) -> Iterator[list[torch.Tensor]]:
    """Batches of 8 from 256 samples, each rank its DistributedSampler's share, reshuffled every epoch."""
    samples = torch.randn(SAMPLES, 16, generator=torch.Generator().manual_seed(1000))
    dataset = TensorDataset(samples, samples.sum(dim=1, keepdim=True).sin())
    if bug == "no_sampler":  # the same seeded shuffle on every rank: every rank gets the same batches
        yield from _forever(
            DataLoader(dataset, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0))
        )
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    epoch = 0
    while True:
        if bug != "no_set_epoch":
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def _forever(loader: DataLoader) -> Iterator[list[torch.Tensor]]:
    while True:
        yield from loader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bug", choices=("none", "nan_data", "no_sampler", "no_set_epoch"), default="none")
    parser.add_argument("--nan-step", type=int, default=7, help="the 0-based step whose batch gets the NaN")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = batches(args.bug)
    for step in range(args.steps):
        inputs, targets = next(data)
        if args.bug == "nan_data" and rank == 2 and step == args.nan_step:
            inputs[0, 0] = float("nan")
        loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        report = loss.detach().clone()
        dist.all_reduce(report)
        if rank == 0 and step % 5 == 0:
            print(f"step {step} loss {report.item() / world:.6f}")
    if rank == 0:
        print(f"final loss {report.item() / world:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
