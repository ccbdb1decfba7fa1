"""A DDP MLP that checkpoints and resumes after a restart, as torchrun --max-restarts expects.

Rank 0 saves the model, the optimizer and the step to ``checkpoint.pt`` in the working directory
every ``--save-every`` steps; a restarted job loads it and goes on from the step after it. The data
position is the step: batch ``k`` is drawn from a generator seeded with ``k``, as a sampler's
``set_epoch`` plus an offset would give it.

Planted bugs (--bug): ``forget_sampler`` — the resume loads the model and the optimizer but draws
the data from the first batch again (a sampler whose position was not saved); ``forget_optimizer`` —
the resume loads the model but not the optimizer, so SGD's momentum starts from zero. Both train on
without an error, to other weights: under timetravel a crash fault and a restart make them a
``resume_mismatch`` naming the first parameter that differs from the run without the crash::

    timetravel torchrun --nproc-per-node 2 --max-restarts 1 \\
        --set 'faults=[{"kind": "crash", "target": "r1", "t_start": 2000000}]' \\
        docs/examples/torch/resume_ddp.py --bug forget_sampler
"""

import argparse
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def batch(position: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + position)
    inputs = torch.randn(8 * world, 16, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True).sin()
    return inputs[rank::world], targets[rank::world]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--bug", choices=("none", "forget_sampler", "forget_optimizer"), default="none")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    checkpoint = Path("checkpoint.pt")
    start = 0
    if checkpoint.exists():
        saved = torch.load(checkpoint)
        model.module.load_state_dict(saved["model"])
        if args.bug != "forget_optimizer":
            optimizer.load_state_dict(saved["optimizer"])
        start = saved["step"]
        if rank == 0:
            print(f"resumed from step {start}")
    position = 0 if args.bug == "forget_sampler" else start
    for step in range(start, args.steps):
        inputs, targets = batch(position, rank, world)
        position += 1
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        reported = loss.detach().clone()
        dist.all_reduce(reported, op=dist.ReduceOp.AVG)
        optimizer.step()
        if rank == 0 and (step + 1) % args.save_every == 0:
            state = {
                "model": model.module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": step + 1,
            }
            torch.save(state, "checkpoint.pt.tmp")
            Path("checkpoint.pt.tmp").replace(checkpoint)  # atomic: a crash never leaves half a file
        dist.barrier()
        if rank == 0:
            print(f"step {step + 1} loss {reported.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
