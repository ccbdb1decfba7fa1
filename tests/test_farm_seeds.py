"""Seed sets and shards: what `--seeds` and `--shard` select."""

from __future__ import annotations

import pytest

from timetravel.farm import SeedSpecError, Shard, parse_seeds, parse_shard


def test_range_is_half_open_and_lists_merge() -> None:
    assert list(parse_seeds("3:7")) == [3, 4, 5, 6]
    seeds = parse_seeds("10:12, 0:3, 2:5, 20")
    assert list(seeds) == [0, 1, 2, 3, 4, 10, 11, 20]
    assert len(seeds) == 8
    assert str(seeds) == "0:5,10:12,20"
    assert 11 in seeds and 12 not in seeds


def test_huge_range_costs_nothing_until_iterated() -> None:
    seeds = parse_seeds("0:1000000000000")
    assert len(seeds) == 10**12
    assert seeds.count_in(Shard(3, 7)) == len(range(3, 10**12, 7))


@pytest.mark.parametrize("text", ["", "5:5", "7:3", "a:b", "-1:4", "1:2:3", "0:9223372036854775809"])
def test_bad_seed_specs_are_user_errors(text: str) -> None:
    with pytest.raises(SeedSpecError):
        parse_seeds(text)


def test_shards_partition_the_seeds_by_value() -> None:
    seeds = parse_seeds("3:11,40:45")
    shards = [Shard(index, 4) for index in range(4)]
    parts = [list(seeds.in_shard(shard)) for shard in shards]
    assert parts[1] == [5, 9, 41]
    assert sorted(seed for part in parts for seed in part) == list(seeds)
    assert [seeds.count_in(shard) for shard in shards] == [len(part) for part in parts]
    # a wider range keeps every seed in the shard that owned it
    assert set(parts[1]) <= set(parse_seeds("0:100").in_shard(shards[1]))


@pytest.mark.parametrize("text", ["1", "4/4", "-1/4", "1/0", "x/y", "1/2/3"])
def test_bad_shards_are_user_errors(text: str) -> None:
    with pytest.raises(SeedSpecError):
        parse_shard(text)


def test_shard_text_round_trips() -> None:
    assert str(parse_shard("2/5")) == "2/5"
    assert parse_shard("0/1") == Shard()
