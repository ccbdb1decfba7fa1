"""Three threads of each rank all_reduce on the default group, as issue 32 measured: the OS orders the
threads, so the simulator refuses it (``unsupported``, the same failure and hash chain every run).
argv: ``threads`` (the default) or ``store`` (three threads write the store instead)."""

import sys
import threading

import torch
import torch.distributed as dist

mode = sys.argv[1] if len(sys.argv) > 1 else "threads"
dist.init_process_group("gloo")
store = dist.distributed_c10d._get_default_store()


def work(index: int) -> None:
    if mode == "store":
        store.set(f"key-{dist.get_rank()}-{index}", str(index))
        return
    value = torch.full((4,), float(index))
    dist.all_reduce(value)


threads = [threading.Thread(target=work, args=(index,), name=f"worker-{index}") for index in range(3)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
value = torch.ones(1)
dist.all_reduce(value)
print("all threads done")
