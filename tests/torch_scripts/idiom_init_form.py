"""Idiom: ``init_process_group`` in the form ``argv[1]`` names, then a few DDP steps printing the loss.

The forms are the ones public training code uses: no arguments, positional and keyword backends, a
per-device backend string, ``timeout=``, explicit ``rank=``/``world_size=``, and the ``env://``,
``tcp://``, ``file://`` and ``store=`` rendezvous. Every form runs under real torchrun with gloo.
"""

import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
rendezvous_file = os.path.join(tempfile.gettempdir(), f"init_form_{os.environ['TORCHELASTIC_RUN_ID']}")
FORMS = {
    "none": lambda: dist.init_process_group(),
    "positional": lambda: dist.init_process_group("gloo"),
    "keyword": lambda: dist.init_process_group(backend="gloo"),
    "per-device": lambda: dist.init_process_group(backend="cpu:gloo"),
    "timeout": lambda: dist.init_process_group(backend="gloo", timeout=datetime.timedelta(minutes=30)),
    "rank-world": lambda: dist.init_process_group("gloo", rank=rank, world_size=world),
    "env": lambda: dist.init_process_group("gloo", init_method="env://"),
    "tcp": lambda: dist.init_process_group(
        "gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=world
    ),
    "file": lambda: dist.init_process_group(
        "gloo", init_method=f"file://{rendezvous_file}", rank=rank, world_size=world
    ),
    "store": lambda: dist.init_process_group(
        "gloo", store=dist.TCPStore(address, port + 1, world, rank == 0), rank=rank, world_size=world
    ),
}
FORMS[sys.argv[1]]()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.Generator().manual_seed(rank)
for step in range(3):
    loss = model(torch.randn(8, 4, generator=data)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"{sys.argv[1]} step {step} loss {loss.item()!r}")
dist.destroy_process_group()
if rank == 0 and os.path.exists(rendezvous_file):
    os.remove(rendezvous_file)
