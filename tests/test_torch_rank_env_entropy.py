"""Entropy inside a rank: unseeded sources follow (seed, rank); the script's own seeds are untouched."""

from __future__ import annotations

import os
import random
import secrets
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from timetravel.torch.rank.env.entropy import install_entropy, preserving_entropy_across_fork

SEED = b"world-seed-7"


def unseeded_draws() -> dict[str, Any]:
    """One value from every unseeded source a training script may touch."""
    return {
        "urandom": os.urandom(12),
        "random": random.random(),
        "fresh_random": random.Random().random(),
        "system_random": random.SystemRandom().random(),
        "secrets": secrets.token_hex(8),
        "uuid4": str(uuid.uuid4()),
        "uuid1_node": uuid.uuid1().node,
        "numpy_legacy": float(np.random.rand()),
        "numpy_default_rng": float(np.random.default_rng().random()),
        "torch_initial_seed": torch.initial_seed(),
        "torch_randn": torch.randn(3).tolist(),
        "torch_seed": torch.seed(),
        "torch_generator_seed": torch.Generator().seed(),
    }


def under(seed: bytes, rank: int, draw: Callable[[], Any]) -> Any:
    with install_entropy(seed, rank=rank):
        return draw()


def test_unseeded_entropy_is_a_function_of_seed_and_rank() -> None:
    first = under(SEED, 0, unseeded_draws)
    assert under(SEED, 0, unseeded_draws) == first
    other_rank = under(SEED, 1, unseeded_draws)
    other_seed = under(b"world-seed-8", 0, unseeded_draws)
    for key in first:
        assert other_rank[key] != first[key], key
        assert other_seed[key] != first[key], key


def test_seeds_the_script_sets_behave_as_without_the_simulator() -> None:
    def seeded() -> list[Any]:
        torch.manual_seed(1234)
        random.seed(5)
        np.random.seed(6)
        return [
            torch.randn(2).tolist(),
            torch.randn(2, generator=torch.Generator().manual_seed(9)).tolist(),
            random.random(),
            random.Random(3).random(),
            float(np.random.rand()),
            float(np.random.default_rng(4).random()),
        ]

    outside = seeded()
    assert under(SEED, 0, seeded) == outside
    assert under(SEED, 3, seeded) == outside


def test_uninstall_restores_the_generators_state() -> None:
    random.seed(11)
    expected = random.random()
    random.seed(11)
    with install_entropy(SEED, rank=0):
        random.random()
    assert random.random() == expected
    assert os.urandom(16) != os.urandom(16)


def fork_and_read() -> tuple[bytes, bytes]:
    """(the child's first 8 urandom bytes, the parent's next 8 after the fork)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write its bytes and leave at once
        os.write(write_end, os.urandom(8))
        os._exit(0)
    os.close(write_end)
    child = os.read(read_end, 8)
    os.close(read_end)
    os.waitpid(pid, 0)
    return child, os.urandom(8)


def test_a_forked_child_draws_its_own_reproducible_bytes() -> None:
    child, parent = under(SEED, 0, fork_and_read)
    assert child != parent
    assert under(SEED, 0, fork_and_read) == (child, parent)


def test_a_checkpoint_fork_continues_the_stream_of_the_original() -> None:
    def checkpoint_then_read() -> tuple[bytes, bytes]:
        with preserving_entropy_across_fork():
            return fork_and_read()

    child, parent = under(SEED, 0, checkpoint_then_read)
    assert child == parent  # the resumed checkpoint draws what the original drew next
    child_after, parent_after = under(SEED, 0, lambda: (checkpoint_then_read(), fork_and_read())[1])
    assert (child_after, parent_after) == under(SEED, 0, lambda: (os.urandom(8), fork_and_read())[1])
