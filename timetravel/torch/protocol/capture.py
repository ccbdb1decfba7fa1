"""The capture file ``--against-real`` reads: what one rank trained, written by the rank itself.

The same rank-side code (:mod:`timetravel.torch.rank.capture`) runs inside real torchrun's ranks and
inside the simulator's, and writes one file per rank, ``rank<N>.capture``: a sequence of records,
each a 4-byte little-endian length and a msgpack map (never pickle), appended as the rank goes:

* ``{"kind": "step", "step": k, "loss": float | None, "tensors": [...]}`` after optimizer step ``k``
  (1, 2, …): the loss the rank called ``backward()`` on since the previous step, and the state;
* ``{"kind": "end", "ended": "returned" | "exit N" | "raised Type", "tensors": [...]}`` when the
  script returned or raised, with the state of the modules that were still alive (none when the
  script's ``main()`` let its model go).

A tensor is ``{"name", "dtype", "shape", "digest", "data"}``: its state_dict name (DDP's ``module.``
and compile's ``_orig_mod.`` left out), the xxh3-64 of its bytes (a DTensor's local shard), and those
bytes while the rank has written fewer than :data:`CAPTURE_VALUES_BYTES_MAX` (``None`` after: the
digest still says equal or not, the relative difference is then unknown). The coordinator reads a
file with :func:`read_capture`, every length checked before its bytes are read.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import msgpack

_LENGTH = struct.Struct("<I")
CAPTURE_RECORD_BYTES_MAX = 512 * 1024 * 1024
"""One record (one step's state, values included): a 128M-parameter fp32 model. A longer record
is written without values, and a length above this in a file is corruption."""
CAPTURE_VALUES_BYTES_MAX = 1 << 30
"""Tensor values one rank writes in all (then digests only): 1 GiB per rank and side on disk,
in a temporary folder removed at the end."""
CAPTURE_RECORDS_MAX = 100_000
"""Records read from one file (a step each): a longer run compares its first 100,000 steps."""


class CaptureError(ValueError):
    """A capture file that does not parse (truncated records are not an error: a rank was killed)."""


def capture_path(folder: str | Path, rank: int) -> Path:
    return Path(folder) / f"rank{rank}.capture"


def encode_record(record: dict[str, Any]) -> bytes:
    body = msgpack.packb(record, use_bin_type=True)
    return _LENGTH.pack(len(body)) + body


def write_record(descriptor: int, record: dict[str, Any]) -> None:
    """Append one record to an open file descriptor (whole, or nothing readable: a partial tail is
    ignored by :func:`read_capture`)."""
    data = memoryview(encode_record(record))
    while data:
        written = os.write(descriptor, data)
        data = data[written:]


def read_capture(path: str | Path) -> list[dict[str, Any]]:
    """Every whole record of a capture file, in order (none when the rank never wrote one)."""
    records: list[dict[str, Any]] = []
    try:
        stream = open(path, "rb")  # noqa: SIM115  (closed below)
    except FileNotFoundError:
        return records
    with stream:
        while len(records) < CAPTURE_RECORDS_MAX:
            header = stream.read(_LENGTH.size)
            if len(header) < _LENGTH.size:
                break
            length = _LENGTH.unpack(header)[0]
            if length > CAPTURE_RECORD_BYTES_MAX:
                raise CaptureError(f"{path}: a record of {length} bytes is over {CAPTURE_RECORD_BYTES_MAX}")
            body = stream.read(length)
            if len(body) < length:
                break  # the rank was killed while writing: its last record is lost, not the file
            try:
                record = msgpack.unpackb(body, raw=False, strict_map_key=True)
            except (ValueError, msgpack.ExtraData) as error:
                raise CaptureError(f"{path}: record {len(records)}: {error}") from None
            if not isinstance(record, dict) or record.get("kind") not in ("step", "end"):
                raise CaptureError(f"{path}: record {len(records)} is not a step or an end")
            records.append(record)
    return records
