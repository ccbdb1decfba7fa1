"""Rank functions for tests of timetravel.torch.simulate (module level: each rank imports them)."""

import torch
import torch.distributed as dist


def sum_of_ranks() -> float:
    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(value)
    return value.item()


def only_rank_zero_reduces() -> None:
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))


NUMEL_TIMED = 1 << 20
"""Four MiB of float32: large enough that its transfer, not the latency, decides a collective's time."""


def one_all_reduce() -> None:
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(NUMEL_TIMED))


def two_concurrent_all_reduces() -> None:
    """Two async all_reduces in flight at once over the same ranks (and so the same links)."""
    dist.init_process_group("gloo")
    first = dist.all_reduce(torch.ones(NUMEL_TIMED), async_op=True)
    second = dist.all_reduce(torch.ones(NUMEL_TIMED), async_op=True)
    first.wait()
    second.wait()


def all_reduce_in_own_pair() -> None:
    """Ranks {0,1} and {2,3} each reduce in their own group: on two hosts of two GPUs they share no link."""
    dist.init_process_group("gloo")
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dist.all_reduce(torch.ones(NUMEL_TIMED), group=pairs[dist.get_rank() // 2])
