"""Every way a script starts torch.distributed, one after another (destroyed in between), and the ways
torch refuses: each accepted form must reach the backend (an all_reduce, a gloo subgroup) and answer
get_backend() as torch does; each refused one must raise torch's own exception with torch's message.

``python init_forms.py cpu`` is what real torchrun with gloo runs on a host without GPUs; ``gpu`` adds
the forms only a CUDA build accepts (nccl, device_id=cuda:N). Forms named after the mode run alone
(real gloo cannot start a group twice in one job: a new group reads the old one's addresses from the
store). Every outcome is printed as one line, so the simulator's output can be compared with real
torchrun's line for line.
"""

import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

mode = sys.argv[1] if len(sys.argv) > 1 else "gpu"
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
shared = os.path.join(tempfile.gettempdir(), f"init_forms_{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}")


def check(form: str) -> None:
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    pair = dist.new_group([0, 1], backend="gloo")
    one = torch.ones(1)
    dist.all_reduce(one, group=pair)
    assert value.item() == world * (world + 1) / 2 and one.item() == 2.0, (value, one)
    print(f"{form}: backend {dist.get_backend()} all_reduce {value.item()}", flush=True)
    dist.destroy_process_group()


def own_store() -> None:
    """The script's own TCPStore: its keys reach the other ranks (under the simulator, through the World)."""
    store = dist.TCPStore(address, port + 2, world, rank == 0)
    store.set(f"own/{rank}", f"from {rank}")
    assert store.get(f"own/{1 - rank}") == f"from {1 - rank}".encode()
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)


ACCEPTED = {
    "no arguments": lambda: dist.init_process_group(),
    "positional": lambda: dist.init_process_group("gloo"),
    "keyword": lambda: dist.init_process_group(backend="gloo"),
    "upper case": lambda: dist.init_process_group(backend="GLOO"),
    "per device": lambda: dist.init_process_group(backend="cpu:gloo"),
    "pg_options": lambda: dist.init_process_group(backend="gloo", pg_options=None),
    "timeout": lambda: dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30)),
    "rank and world_size": lambda: dist.init_process_group("gloo", rank=rank, world_size=world),
    "env://": lambda: dist.init_process_group("gloo", init_method="env://"),
    "tcp://": lambda: dist.init_process_group(
        "gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=world
    ),
    "file://": lambda: dist.init_process_group(
        "gloo", init_method=f"file://{shared}", rank=rank, world_size=world
    ),
    "store=": lambda: own_store(),
    "init_device_mesh": lambda: init_device_mesh("cpu", (world,)),
}
if mode == "gpu":
    ACCEPTED |= {
        "nccl": lambda: dist.init_process_group("nccl"),
        "keyword nccl": lambda: dist.init_process_group(backend="nccl"),
        "cpu and cuda": lambda: dist.init_process_group(backend="cpu:gloo,cuda:nccl"),
        "device_id index": lambda: dist.init_process_group("nccl", device_id=rank),
        "device_id cuda": lambda: dist.init_process_group(device_id=torch.device("cuda", rank)),
    }

REFUSED = {
    "twice": lambda: (dist.init_process_group("gloo"), dist.init_process_group("gloo")),
    "store and init_method": lambda: dist.init_process_group(
        "gloo", init_method="env://", store=dist.HashStore(), rank=rank, world_size=world
    ),
    "device_id cpu": lambda: dist.init_process_group("gloo", device_id=torch.device("cpu")),
    "bad pairing": lambda: dist.init_process_group(backend="cpu:gloo:x"),
    "unknown backend": lambda: dist.init_process_group(backend="carrier_pigeon"),
    "tcp:// without rank": lambda: dist.init_process_group("gloo", init_method=f"tcp://{address}:{port + 3}"),
    "timeout in seconds": lambda: dist.init_process_group("gloo", timeout=30),
}
if mode == "gpu":
    REFUSED |= {
        "device_id out of range": lambda: dist.init_process_group("nccl", device_id=7),
        "device_id without index": lambda: dist.init_process_group("nccl", device_id=torch.device("cuda")),
    }

chosen = set(sys.argv[2:]) or set(ACCEPTED) | set(REFUSED)
for form, start in ACCEPTED.items():
    if form in chosen:
        start()
        check(form)
for form, start in REFUSED.items():
    if form not in chosen:
        continue
    try:
        start()
    except Exception as error:  # torch's own refusal: its type and its message are the point
        first_line = str(error).strip().splitlines()[0].strip()
        print(f"{form}: {type(error).__name__}: {first_line}", flush=True)
    else:
        print(f"{form}: accepted", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
