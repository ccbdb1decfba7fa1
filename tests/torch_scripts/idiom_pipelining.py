"""Idiom: ``torch.distributed.pipelining`` with two stages — a model split by hand into a first and a
second half, one ``PipelineStage`` per rank, the GPipe schedule over 4 micro-batches, the loss on the
last stage, an optimizer per stage. Run with 2 ranks; prints the last stage's loss of each step.
"""

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2, "two stages, one per rank"
device = torch.device(f"cuda:{rank}" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
halves = [
    torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh()),
    torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)),
]
stage_module = halves[rank].to(device)
stage = PipelineStage(stage_module, rank, world, device)
losses: list[torch.Tensor] = []
schedule = ScheduleGPipe(
    stage, n_microbatches=4, loss_fn=lambda output, target: (output - target).pow(2).mean()
)
optimizer = torch.optim.SGD(stage_module.parameters(), lr=0.05)
data = torch.Generator().manual_seed(3)
for step in range(4):
    x = torch.randn(16, 8, generator=data).to(device)
    target = torch.randn(16, 1, generator=data).to(device)
    optimizer.zero_grad()
    if rank == 0:
        schedule.step(x)
    else:
        losses.clear()
        schedule.step(target=target, losses=losses)
        print(f"step {step} loss {torch.stack(losses).mean().item()!r}")
    optimizer.step()
dist.destroy_process_group()
