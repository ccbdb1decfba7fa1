from __future__ import annotations

import ml_dtypes
import msgpack
import numpy as np
import pytest

from timetravel.sim import check_plain
from timetravel.sim.encoding import (
    PAGE_BYTES,
    DecodeError,
    array_digest,
    array_digest_from_pages,
    digest,
    pack,
    page_digests,
    unpack,
)


def test_plain_data_with_arrays_round_trips_bit_for_bit() -> None:
    value = {
        "weights": np.arange(12, dtype=np.float32).reshape(3, 4),
        "half": np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16),
        "nested": [1, "two", None, True, 2.5, b"\x00\x01", {"k": np.int64(7)}],
    }
    decoded = unpack(pack(value))
    assert decoded["weights"].dtype == np.float32 and decoded["weights"].shape == (3, 4)
    assert decoded["weights"].tobytes() == value["weights"].tobytes()
    assert decoded["half"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert decoded["nested"][:6] == [1, "two", None, True, 2.5, b"\x00\x01"]
    assert decoded["nested"][6] == {"k": 7}


def test_objects_that_are_not_plain_data_are_refused() -> None:
    with pytest.raises(TypeError, match="not plain data"):
        pack({"x": object()})
    with pytest.raises(TypeError, match="not allowed"):
        pack(np.array(["a"], dtype=object))
    with pytest.raises(TypeError, match="/a/1"):
        check_plain({"a": [1, {1, 2}]})
    with pytest.raises(TypeError, match="not a str"):
        check_plain({1: 2})


def test_decoding_untrusted_bytes_fails_cleanly() -> None:
    with pytest.raises(DecodeError):
        unpack(b"\xc1")
    with pytest.raises(DecodeError, match="exceeds"):
        unpack(pack(list(range(100))), bytes_max=10)
    bogus_dtype = msgpack.ExtType(1, msgpack.packb(["object", [1], b"\x00" * 8]))
    with pytest.raises(DecodeError, match="allow-list"):
        unpack(msgpack.packb(bogus_dtype))
    wrong_size = msgpack.ExtType(1, msgpack.packb(["float32", [4], b"\x00" * 8]))
    with pytest.raises(DecodeError, match="needs 16 bytes"):
        unpack(msgpack.packb(wrong_size))
    with pytest.raises(DecodeError, match="extension type 9"):
        unpack(msgpack.packb(msgpack.ExtType(9, b"")))


def test_array_digest_is_built_from_page_digests() -> None:
    array = np.arange(3 * PAGE_BYTES // 8 + 5, dtype=np.float64)
    pages = page_digests(array)
    assert len(pages) == 4
    assert array_digest(array) == array_digest_from_pages("float64", array.shape, pages)
    changed = array.copy()
    changed[-1] += 1.0
    changed_pages = page_digests(changed)
    assert changed_pages[:3] == pages[:3] and changed_pages[3] != pages[3]


def test_digest_sees_dtype_shape_and_values() -> None:
    base = np.zeros(4, dtype=np.float32)
    assert digest(base) != digest(base.astype(np.float64))
    assert digest(base) != digest(base.reshape(2, 2))
    assert digest(base) == digest(np.zeros(4, dtype=np.float32))
    assert digest({"a": 1, "b": 2}) != digest({"b": 2, "a": 1})  # insertion order is part of the data


def test_msgpack_refuses_nesting_past_its_stack_and_unpack_past_the_depth_limit() -> None:
    """unpackb_bounded relies on msgpack's fixed stack (MSGPACK_STACK_DEPTH): pinned here, so a
    msgpack that changes it fails this test rather than the limit (issue 32 item 9)."""
    from timetravel.sim.encoding import DECODE_DEPTH_MAX, MSGPACK_STACK_DEPTH

    msgpack.unpackb(b"\x91" * MSGPACK_STACK_DEPTH + b"\x01")
    with pytest.raises(msgpack.StackError):
        msgpack.unpackb(b"\x91" * (MSGPACK_STACK_DEPTH + 1) + b"\x01")
    assert unpack(b"\x91" * DECODE_DEPTH_MAX + b"\xc0", items_max=1000) is not None
    for depth in (DECODE_DEPTH_MAX + 1, 1000):
        with pytest.raises(DecodeError, match=f"nested more than {DECODE_DEPTH_MAX} deep"):
            unpack(b"\x91" * depth + b"\xc0", items_max=10**6)
    shallow = [[index] for index in range(200)]  # 201 list headers: decoded inside the wrapping lists
    with pytest.raises(DecodeError, match="decodes to more than 600 containers"):
        unpack(pack(shallow), items_max=600)  # 201 + 200 x 2: the wrapping lists are not charged
    assert unpack(pack(shallow), items_max=601) == shallow
