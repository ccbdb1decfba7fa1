"""Decoding a read-only value against an earlier one (snapshot/_speedups_against.h ``decode_plain_against``).

snapshot/codec.py ``decode_value_against`` must give exactly the value a plain decode gives — types,
key order, float bits, arrays — whatever the base: the same value, a neighbour's, another shape, or
bytes that are not valid at all. It may share with the base only the parts whose bytes are equal,
and must never change the base.
"""

from __future__ import annotations

import copy
import gc
import sys
from typing import Any

import msgpack
import numpy as np
import pytest

from tests.test_decode_plain import BYTES_MAX, UNUSUAL, Arrays, _same
from timetravel.sim.encoding import DecodeError, pack_for_hash
from timetravel.snapshot import codec, speedups

COMPILED = getattr(speedups.compiled, "decode_plain_against", None)
ARRAYS = [np.arange(4, dtype=np.float32), np.ones((2, 2)), np.zeros(3, dtype=np.int64)]


def _rank(index: int, **changes: Any) -> dict[str, Any]:
    """A small rank state in dp_training's shape: flat scalars, arrays, and a nested GPU table."""
    state: dict[str, Any] = {
        "index": index,
        "next": f"r{index + 1}",
        "weights": ARRAYS[0],
        "inputs": ARRAYS[1 + index % 2],
        "step": 3,
        "loss": 0.25,
        "children": [f"r{2 * index}", f"r{2 * index + 1}"],
        "gpu": {
            "epoch": 0,
            "streams": {
                "compute": {"queue": [{"op": "record", "event": "e"}], "running": None, "clock": [1]},
                "comm": {
                    "queue": [],
                    "running": {"name": "allreduce", "end_ns": 900 + index},
                    "clock": [0, 0],
                },
            },
            "access": {"grad": {"write": [0, 1, "forward"], "reads": {}}},
        },
    }
    state.update(changes)
    return state


def _decode(data: bytes, factory: Arrays, memo: dict[bytes, Any]) -> Any:
    return codec.decode_value_sized(data, factory, bytes_max=BYTES_MAX, shared=memo)[0]


def _against(data: bytes, base: tuple[bytes, Any], factory: Arrays, memo: dict[bytes, Any]) -> Any:
    return codec.decode_value_against(data, base, factory, bytes_max=BYTES_MAX, arrays=None, shared=memo)[0]


def _nested(depth: int, leaf: int) -> Any:
    value: Any = leaf
    for level in range(depth):
        value = {"a": value, "level": level}
    return value


def _pairs() -> dict[str, tuple[Any, Any]]:
    gpu_changed = copy.deepcopy(_rank(1)["gpu"])
    gpu_changed["streams"]["compute"]["clock"] = [2]
    reordered = dict(reversed(list(_rank(1).items())))
    return {
        "same value": (_rank(1), _rank(1)),
        "neighbour rank": (_rank(1), _rank(2)),
        "one deep int": (_rank(1), _rank(1, gpu=gpu_changed)),
        "an entry more": (_rank(1), _rank(1, extra={"a": 1})),
        "an entry fewer": (_rank(1, extra=1), _rank(1)),
        "keys in another order": (_rank(1), reordered),
        "a map became a list": (_rank(1), _rank(1, gpu=[1, 2, 3])),
        "a list became a map": (_rank(1, children={"a": 1}), _rank(1)),
        "another array": (_rank(1), _rank(1, weights=ARRAYS[2])),
        "float bits": (_rank(1, loss=0.0), _rank(1, loss=-0.0)),
        "a list base": ([1, 2, {"a": 1}], _rank(1)),
        "a scalar value": (_rank(1), 7),
        "scalars of one length": (7, 8),
        "strs of one length": ("abc", "abd"),
        "maps 100 deep": (_nested(100, 1), _nested(100, 2)),
        "wide map": (
            {f"k{index}": index for index in range(300)},
            {f"k{index}": -index for index in range(300)},
        ),
    }


@pytest.mark.skipif(COMPILED is None, reason="needs the compiled core (make install)")
@pytest.mark.parametrize("name", list(_pairs()))
def test_against_any_base_the_value_is_the_plain_decode(name: str) -> None:
    base_value, value = _pairs()[name]
    factory = Arrays(ARRAYS)
    base_data, data = pack_for_hash(base_value), pack_for_hash(value)
    base = _decode(base_data, factory, {})
    kept = copy.deepcopy(base)
    decoded = _against(data, (base_data, base), factory, {})
    assert _same(decoded, _decode(data, factory, {}))
    assert _same(base, kept)  # the base is never written


@pytest.mark.skipif(COMPILED is None, reason="needs the compiled core (make install)")
def test_only_the_parts_with_equal_bytes_are_shared_with_the_base() -> None:
    factory = Arrays(ARRAYS)
    base_data, data = pack_for_hash(_rank(1)), pack_for_hash(_rank(2))
    base = _decode(base_data, factory, {})
    decoded = _against(data, (base_data, base), factory, {})
    gpu, base_gpu = decoded["gpu"], base["gpu"]
    assert decoded is not base and gpu is not base_gpu
    assert gpu["access"] is base_gpu["access"]  # equal bytes: the base's own object
    assert gpu["streams"]["compute"] is base_gpu["streams"]["compute"]
    assert gpu["streams"]["comm"] is not base_gpu["streams"]["comm"]  # end_ns differs
    assert (
        gpu["streams"]["comm"]["running"]["end_ns"] == 902
        and base_gpu["streams"]["comm"]["running"]["end_ns"] == 901
    )
    assert decoded["children"] is not base["children"] and decoded["children"] == ["r4", "r5"]
    assert list(decoded) == list(base)
    assert not any(gc.is_tracked(item) for item in (decoded, gpu, gpu["streams"], gpu["streams"]["comm"]))


PLACEHOLDER = 0x7EDCBA98
"""An int whose encoding (0xce and four bytes) appears once in a rank's bytes: spliced out below."""


def _spliced(unusual: bytes) -> bytes:
    """A neighbour rank's bytes with the unusual bytes as one deep value (the GPU's epoch), so the
    decoder meets them after walking entries equal to the base's."""
    gpu = copy.deepcopy(_rank(2)["gpu"])
    gpu["epoch"] = PLACEHOLDER
    data = pack_for_hash(_rank(2, gpu=gpu))
    marker = b"\xce" + PLACEHOLDER.to_bytes(4, "big")
    assert data.count(marker) == 1
    return data.replace(marker, unusual)


@pytest.mark.skipif(COMPILED is None, reason="needs the compiled core (make install)")
@pytest.mark.parametrize("where", ["alone", "inside a neighbour"])
@pytest.mark.parametrize("name", list(UNUSUAL))
def test_unusual_bytes_decode_against_a_base_as_msgpack_decodes_them(name: str, where: str) -> None:
    """Hostile bytes: the value or the error is the plain decode's (which is msgpack's)."""
    factory = Arrays(ARRAYS)
    base_data = pack_for_hash(_rank(1))
    base = _decode(base_data, factory, {})
    data = UNUSUAL[name] if where == "alone" else _spliced(UNUSUAL[name])
    outcomes = []
    for against in (False, True):
        try:
            outcomes.append(
                (
                    "value",
                    _against(data, (base_data, base), factory, {}) if against else _decode(data, factory, {}),
                )
            )
        except DecodeError as error:
            outcomes.append(("error", str(error)))
    assert outcomes[0][0] == outcomes[1][0]
    if outcomes[0][0] == "error":
        assert outcomes[0][1] == outcomes[1][1]
        return
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))  # _same walks 600 levels deep
    try:
        assert _same(outcomes[0][1], outcomes[1][1])
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.skipif(COMPILED is None, reason="needs the compiled core (make install)")
def test_a_map_that_repeats_a_key_is_never_used_as_a_base() -> None:
    # {"a": 1, "a": {"x": 1}, "b": 2} decodes to two entries; its bytes claim three
    base_data = b"\x83\xa1a\x01\xa1a\x81\xa1x\x01\xa1b\x02"
    factory = Arrays(ARRAYS)
    base = _decode(base_data, factory, {})
    assert base == {"a": {"x": 1}, "b": 2}
    data = msgpack.packb({"a": 1, "c": 3, "b": 2})
    assert _same(_against(data, (base_data, base), factory, {}), {"a": 1, "c": 3, "b": 2})


def test_without_the_compiled_core_it_is_the_plain_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "_decode_plain_against", None)
    factory = Arrays(ARRAYS)
    base_data, data = pack_for_hash(_rank(1)), pack_for_hash(_rank(2))
    base = _decode(base_data, factory, {})
    decoded = _against(data, (base_data, base), factory, {})
    assert (
        _same(decoded, _decode(data, factory, {})) and decoded["gpu"]["access"] is not base["gpu"]["access"]
    )
