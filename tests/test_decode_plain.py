"""The compiled decoder of stored values (snapshot/_speedups_plain.h ``decode_plain``) gives msgpack's value.

snapshot/codec.py ``decode_value_sized`` decodes the common case in C and hands anything unusual back
to msgpack; every value below is decoded both ways (the reference with the compiled decoder switched
off) and compared object by object: types, key order, float bits, arrays.
"""

from __future__ import annotations

import gc
import struct
import sys
from typing import Any

import msgpack
import numpy as np
import pytest

from timetravel.sim.encoding import EXT_ARRAY_DIGEST, DecodeError, array_digest, pack_for_hash
from timetravel.snapshot import codec, speedups

COMPILED = getattr(speedups.compiled, "decode_plain", None)
BYTES_MAX = 256 * 1024 * 1024


def _same(left: Any, right: Any) -> bool:
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, float):
        return struct.pack("<d", left) == struct.pack("<d", right)
    if isinstance(left, np.ndarray):
        return bool(
            left.dtype == right.dtype and left.shape == right.shape and left.tobytes() == right.tobytes()
        )
    return bool(left == right)


class Arrays:
    """An array factory over {digest: array}, counting its calls."""

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.by_digest = {array_digest(array): array for array in arrays}
        self.calls = 0

    def __call__(self, digest: bytes) -> np.ndarray:
        self.calls += 1
        return self.by_digest[digest]


def _reference(data: bytes, factory: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as patch:
        patch.setattr(codec, "_decode_plain", None)
        return codec.decode_value(data, factory, bytes_max=BYTES_MAX)


def _both(data: bytes, factory: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """(msgpack's outcome, decode_value_sized's outcome): a value or the error's text."""
    outcomes = []
    for reference in (True, False):
        try:
            if reference:
                outcomes.append(("value", _reference(data, factory, monkeypatch)))
            else:
                outcomes.append(("value", codec.decode_value_sized(data, factory, bytes_max=BYTES_MAX)[0]))
        except DecodeError as error:
            outcomes.append(("error", str(error)))
    return outcomes[0], outcomes[1]


def _plain_values() -> list[Any]:
    ints = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]
    ints += [-1, -32, -33, -128, -129, -(2**15), -(2**15) - 1, -(2**31), -(2**31) - 1, -(2**63)]
    floats = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 5e-324, 0.1, -1.5e300]
    strs = ["", "a", "x" * 31, "x" * 32, "x" * 33, "ü€𝄞", "phase", "r9999", "y" * 300, "z" * 70_000]
    blobs = [b"", b"\x00", b"b" * 255, b"b" * 256, b"c" * 70_000]
    wide = {f"k{index}": index for index in range(20)}
    nested: Any = {"gpu": {"streams": {"comm": {"queue": [{"op": "wait", "event": "e"}] * 3}}}}
    return [
        None,
        True,
        False,
        *ints,
        *floats,
        *strs,
        *blobs,
        [],
        {},
        list(range(20)),
        wide,
        nested,
        {"ints": ints, "floats": floats, "strs": strs, "blobs": blobs, "nested": [nested, nested]},
        [[[[[[1]]]]]],
    ]


@pytest.mark.skipif(COMPILED is None, reason="needs the compiled core (make install)")
@pytest.mark.parametrize("value", _plain_values(), ids=lambda value: type(value).__name__)
def test_the_compiled_decoder_gives_msgpacks_value(value: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    data = pack_for_hash(value)
    assert (
        COMPILED is not None
        and COMPILED(data, None, BYTES_MAX, False, None, None, False, None) is not NotImplemented
    )
    reference, decoded = _both(data, None, monkeypatch)
    assert reference[0] == decoded[0] == "value"
    assert _same(reference[1], decoded[1])


@pytest.mark.skipif(COMPILED is None, reason="needs the compiled core (make install)")
def test_arrays_come_from_the_factory_or_the_cache_and_small_containers_are_shared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arrays = [np.arange(5, dtype=np.float32), np.ones((2, 3)), np.array([], dtype=np.int64)]
    factory = Arrays(arrays)
    rank = {
        "bucket": arrays[0],
        "inputs": arrays[1],
        "gpu": {"access": {"grad": {"reads": {}, "write": [0, 3]}}},
    }
    value = {"index": 5, **rank, "empty": arrays[2], "log": [[1, 2, 3], [1, 2, 3]]}
    data = pack_for_hash(value)
    reference = _reference(data, factory, monkeypatch)
    calls = factory.calls
    decoded, cached_bytes = codec.decode_value_sized(data, factory, bytes_max=BYTES_MAX)
    assert _same(reference, decoded) and cached_bytes == 0 and factory.calls == 2 * calls
    # the cache's arrays are used without calling the factory: as they are, or copied
    cache = {digest: (array, array.nbytes) for digest, array in factory.by_digest.items()}
    shared, cached_bytes = codec.decode_value_sized(data, factory, bytes_max=BYTES_MAX, arrays=cache)
    assert factory.calls == 2 * calls and cached_bytes == sum(array.nbytes for array in arrays)
    assert shared["bucket"] is arrays[0] and _same(reference, shared)
    copied, _ = codec.decode_value_sized(data, factory, bytes_max=BYTES_MAX, arrays=cache, copy_arrays=True)
    assert copied["bucket"] is not arrays[0] and copied["bucket"].flags.writeable and _same(reference, copied)
    # shared: the small containers of equal bytes are one object, and out of the collector's reach
    memo: dict[bytes, Any] = {}
    first, _ = codec.decode_value_sized(data, factory, bytes_max=BYTES_MAX, shared=memo)
    second, _ = codec.decode_value_sized(pack_for_hash(rank), factory, bytes_max=BYTES_MAX, shared=memo)
    assert _same(reference, first) and memo
    assert first["gpu"] is second["gpu"] and first["log"][0] is first["log"][1]
    assert not any(gc.is_tracked(item) for item in (first, first["gpu"], first["log"], second))
    assert gc.is_tracked(decoded) and decoded["log"][0] is not decoded["log"][1]


def _ext(code: int, payload: bytes) -> bytes:
    """An ext value by hand (msgpack.ExtType refuses the negative codes a hostile file may hold)."""
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
    return bytes([fixed[len(payload)], code & 0xFF]) + payload


UNUSUAL = {
    "timestamp extension": _ext(-1, struct.pack(">I", 7)),
    "unknown extension": _ext(5, b"x" * 16),
    "array extension of 8 bytes": _ext(EXT_ARRAY_DIGEST, b"x" * 8),
    "bytes key": msgpack.packb({b"k": 1}, use_bin_type=True),
    "int key": b"\x81\x01\x02",
    "invalid UTF-8": b"\xa2\xff\xfe",
    "trailing byte": msgpack.packb([1, 2]) + b"\x00",
    "truncated map": msgpack.packb({"a": [1, 2, 3]})[:-1],
    "truncated float": b"\xcb\x00\x00",
    "reserved tag": b"\xc1",
    "nested 600 deep": b"\x91" * 600 + b"\x01",
    "nested 2000 deep": b"\x91" * 2000 + b"\x01",
    "array of 2**32-1 claimed": b"\xdd\xff\xff\xff\xff\x01",
    "map of 2**16-1 claimed": b"\xde\xff\xff\x01\x01",
    "str past the end": b"\xdb\x00\x01\x00\x00abc",
    "float32": b"\x92\xca" + struct.pack(">f", 0.1) + b"\xca" + struct.pack(">f", float("nan")),
}


@pytest.mark.skipif(COMPILED is None, reason="needs the compiled core (make install)")
@pytest.mark.parametrize("name", list(UNUSUAL))
def test_unusual_bytes_decode_as_msgpack_decodes_them(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile or unusual input: the compiled decoder hands it back (NotImplemented) or decodes it
    exactly as msgpack does, so the value or the error is msgpack's."""
    data = UNUSUAL[name]
    reference, decoded = _both(data, Arrays([]), monkeypatch)
    if reference[0] == "value":
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 5000))  # _same walks 600 levels deep
        try:
            assert decoded[0] == "value" and _same(reference[1], decoded[1])
        finally:
            sys.setrecursionlimit(limit)
    else:
        assert decoded == reference


@pytest.mark.skipif(COMPILED is None, reason="needs the compiled core (make install)")
def test_an_error_from_the_array_factory_is_the_one_msgpack_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    data = pack_for_hash({"bucket": np.zeros(3)})
    missing = Arrays([])  # KeyError for every digest: "not valid msgpack", as through msgpack
    assert _both(data, missing, monkeypatch)[0] == _both(data, missing, monkeypatch)[1]
    assert _both(data, missing, monkeypatch)[0][0] == "error"

    def refuse(digest: bytes) -> np.ndarray:
        raise RuntimeError(f"no array {digest.hex()}")

    for use_compiled in (False, True):
        with monkeypatch.context() as patch:
            if not use_compiled:
                patch.setattr(codec, "_decode_plain", None)
            with pytest.raises(RuntimeError, match="no array"):
                codec.decode_value_sized(data, refuse, bytes_max=BYTES_MAX)


def test_without_the_compiled_decoder_the_options_change_nothing_but_speed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arrays = [np.arange(4)]
    factory = Arrays(arrays)
    value = {"a": [1, 2], "b": [1, 2], "x": arrays[0]}
    data = pack_for_hash(value)
    monkeypatch.setattr(codec, "_decode_plain", None)
    cache = {digest: (array, array.nbytes) for digest, array in factory.by_digest.items()}
    decoded, cached_bytes = codec.decode_value_sized(
        data, factory, bytes_max=BYTES_MAX, arrays=cache, shared={}
    )
    assert _same(decoded, value) and cached_bytes == 0 and factory.calls == 1


@pytest.mark.skipif(COMPILED is None, reason="needs the compiled core (make install)")
def test_the_item_budget_holds_the_same_in_both_decoders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values over 1 MiB decode under an items budget (the fabric part of a 10,000-rank world):
    the same value within it, the same error past it, whichever decoder runs."""
    value = {"links": [[index, {"busy_until_ns": index * 7}] for index in range(50)], "names": {"a": "b"}}
    data = pack_for_hash(value)
    items = 1 + len(value) + 1 + 50 + 50 * (1 + 2 + 1 + 1) + 1 + 1  # each container: its length + 1
    outcomes = []
    for items_max in (items - 1, items, items + 1, 10):
        for use_compiled in (False, True):
            with monkeypatch.context() as patch:
                if not use_compiled:
                    patch.setattr(codec, "_decode_plain", None)
                try:
                    decoded = codec.decode_value_sized(data, None, bytes_max=BYTES_MAX, items_max=items_max)[
                        0
                    ]
                    outcomes.append((items_max, "value", _same(decoded, value)))
                except DecodeError as error:
                    outcomes.append((items_max, "error", str(error)))
    assert outcomes[0::2] == outcomes[1::2]
    assert [outcome[1] for outcome in outcomes[0::2]] == ["error", "value", "value", "error"]


@pytest.mark.skipif(getattr(speedups.compiled, "copy_plain", None) is None, reason="needs the compiled core")
def test_a_fresh_copy_is_what_decoding_afresh_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """reader.fresh_value copies a kept decode instead of decoding the bytes again: the copy must be
    the fresh decode — equal, no container shared with the kept value or within itself, arrays
    writeable copies, containers tracked by the collector as a decode's are."""
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3)]
    factory = Arrays(arrays)
    value = {"gpu": {"queue": [[1, 2, 3], [1, 2, 3]]}, "w": arrays[0], "s": "r12", "f": -0.0, "n": None}
    data = pack_for_hash(value)
    fresh = _reference(data, lambda digest: factory(digest).copy(), monkeypatch)
    held = codec.decode_value_sized(data, factory, bytes_max=BYTES_MAX, shared={})[0]  # memoized, read-only
    assert held["gpu"]["queue"][0] is held["gpu"]["queue"][1]
    copied = codec.fresh_copy(held)
    assert _same(fresh, copied)
    assert copied["gpu"] is not held["gpu"] and copied["gpu"]["queue"][0] is not copied["gpu"]["queue"][1]
    assert copied["w"] is not arrays[0] and copied["w"].flags.writeable and copied["w"].flags.c_contiguous
    copied["gpu"]["queue"][0].append(4)
    assert held["gpu"]["queue"][0] == [1, 2, 3]
    assert gc.is_tracked(copied) and gc.is_tracked(copied["gpu"]["queue"])
    assert codec.fresh_copy((1, 2)) is NotImplemented and codec.fresh_copy({"e": [(1,)]}) is NotImplemented
    monkeypatch.setattr(codec, "_copy_plain", None)
    assert codec.fresh_copy(held) is NotImplemented


def test_nesting_deeper_than_the_limit_is_refused_by_both_decoders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32 item 9: nesting is a limit checked while decoding. Lists DECODE_DEPTH_MAX deep
    decode, one more is one DecodeError, whichever decoder runs (the compiled one hands anything
    deeper than PLAIN_DEPTH_MAX back to msgpack's path, which refuses past the limit)."""
    from timetravel.sim.encoding import DECODE_DEPTH_MAX

    outcomes = []
    for depth in (DECODE_DEPTH_MAX - 8, DECODE_DEPTH_MAX, DECODE_DEPTH_MAX + 1, 1000, 100_000):
        data = b"\x91" * depth + b"\x07"
        for use_compiled in (False, True):
            with monkeypatch.context() as patch:
                if not use_compiled:
                    patch.setattr(codec, "_decode_plain", None)
                try:
                    decoded = codec.decode_value_sized(data, None, bytes_max=BYTES_MAX, items_max=10**6)[0]
                    for _level in range(depth):
                        decoded = decoded[0]
                    outcomes.append((depth, decoded))
                except DecodeError as error:
                    outcomes.append((depth, str(error)))
    assert outcomes[0::2] == outcomes[1::2]
    assert [outcome for _depth, outcome in outcomes[0::2]] == [
        7,
        7,
        *[f"nested more than {DECODE_DEPTH_MAX} deep"] * 3,
    ]
