"""One all_reduce between the ranks and nothing else: the walk of a collective (tests/test_torch_walk.py)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
tensor = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(tensor)
expected = float(sum(range(1, dist.get_world_size() + 1)))
assert tensor.tolist() == [expected] * 4, tensor
dist.destroy_process_group()
