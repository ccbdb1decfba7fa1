import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ValueError("bad batch shape on this rank")
dist.barrier()
