"""The replicas' memo key (dp_training/replicas.py): the weights' bytes, whatever their dtype (a
memoryview of float16 or bfloat16 weights is refused by the buffer protocol: the array is hashed)."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from timetravel.scenarios.dp_training import replicas
from timetravel.scenarios.dp_training.numerics import DTYPES


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_weights_key_is_the_hash_of_the_weights_bytes(dtype: str) -> None:
    weights = np.linspace(-1.0, 1.0, 257).astype(DTYPES[dtype] if dtype == "bfloat16" else dtype)
    expected = xxhash.xxh3_128_intdigest(weights.tobytes())
    assert replicas._weights_key(weights) == expected
    assert replicas._weights_key(weights[::2]) == xxhash.xxh3_128_intdigest(weights[::2].tobytes())


def test_weights_key_tells_one_flipped_bit() -> None:
    weights = np.ones(64, dtype=np.float16)
    flipped = weights.copy()
    flipped.view(np.uint16)[5] ^= 1
    assert replicas._weights_key(weights) != replicas._weights_key(flipped)
