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
