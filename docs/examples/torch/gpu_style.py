"""Written for GPUs as people write them: cuda:N devices, DDP(device_ids), autocast, GradScaler, CUDA events.

    torchrun --standalone --nproc-per-node 2 docs/examples/torch/gpu_style.py      # on a GPU machine
    timetravel torchrun --nproc-per-node 2 docs/examples/torch/gpu_style.py        # on a laptop, unchanged

Under timetravel ``torch.cuda.is_available()`` is true inside the ranks, tensors live on the CPU, autocast
runs CPU autocast (bfloat16), GradScaler scales as on a GPU and CUDA events time in logical time.
Planted bug (--bug nan_scale): rank 1 multiplies its loss by inf at step 4. On a real cluster the inf is
averaged into every rank's gradients and GradScaler quietly skips the step everywhere; timetravel's
``nan`` detector names the rank and the gradient all_reduce the inf entered through.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--bug", choices=("none", "nan_scale"), default="none")
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device(f"cuda:{local_rank}")
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    generator = torch.Generator().manual_seed(100 + rank)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    started = time.perf_counter()
    for step in range(args.steps):
        inputs = torch.randn(16, 32, generator=generator).to(device, non_blocking=True)
        targets = torch.randint(0, 4, (16,), generator=generator).cuda()
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(ddp(inputs), targets)
        if args.bug == "nan_scale" and rank == 1 and step == 4:
            loss = loss * float("inf")
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        end.record()
        torch.cuda.synchronize()
        if rank == 0 and step % 4 == 0:
            print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale():.0f} step_ms {start.elapsed_time(end):.3f}")
    elapsed = time.perf_counter() - started
    if rank == 0:
        print(f"{args.steps} steps in {elapsed:.6f} s on {torch.cuda.get_device_name(device)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
