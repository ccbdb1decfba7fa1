"""An EVENTS frame's bytes and zstd level: the kernel's packed chain batch joined into the frame's
payload without a second copy (``pack_events_payload``), compressed at a level that depends only on
its bytes an event (``events_level``). recording/writer.py writes the frame.
"""

from __future__ import annotations

import struct
from typing import Any

from timetravel.sim.encoding import pack

ZSTD_LEVEL_EVENTS = -3
"""Event batches are written on the hot path: a fast negative level. Batches of small events still
shrink ~5x; dp_training's message-level batches (mostly float chunks) shrink 1.9x instead of 2.6x
at level 1, in half the time (0.24 s against 0.47 s for the demo's 34 MB on a loaded machine).

Kept at -3 after counting the alternatives (issue 18 part 7; instructions for the demo's 34 MB of
message-level batches, stored bytes): -3 274 M, 17.70 MB; -4 250 M, 17.70 MB; -5 226 M, 17.84 MB;
-10 164 M, 18.43 MB; -20 115 M, 18.44 MB. The faster levels cost small-event batches far more:
gossip's default run stores 2.45x at -3, 2.24x at -4, 1.96x at -5, 1.04x at -20. So only batches
of large events take a faster level (ZSTD_LEVEL_EVENTS_HEAVY); where cores are spare, compression
runs on a second thread (compress_ahead.py), off the simulation's."""
ZSTD_LEVEL_EVENTS_HEAVY = -20
"""Event batches of EVENT_BYTES_HEAVY or more bytes an event (their payloads are arrays: the gradient
chunks of a message-level all-reduce) are compressed at this faster level. Their bytes are mostly
float payloads that a negative level stores as raw literals anyway, so -20 finds nearly what -3
finds, in 40% of the instructions (issue 18 part 6, the message-level demo's 34 MB of batches,
callgrind: -3 243 M, 17.70 MB; -5 194 M, 17.84 MB; -10 136 M, 18.43 MB; -20 98 M, 18.44 MB;
-50 78 M, 20.57 MB). Small-event batches keep -3, where -20 lost most of the saving (gossip's
default run: 2.45x at -3, 1.04x at -20); theirs are 20-100 bytes an event, the demo's ~470."""
EVENT_BYTES_HEAVY = 256
"""Packed bytes an event, on average over a batch, from which the batch takes ZSTD_LEVEL_EVENTS_HEAVY
(a function of the batch's bytes: the same batch always gets the same level)."""
BIN8, BIN16, BIN32 = struct.Struct(">BB"), struct.Struct(">BH"), struct.Struct(">BI")
"""msgpack's bin 8/16/32 headers: the type byte, then the length, big-endian."""


def pack_events_payload(payload: dict[str, Any], events_bytes: bytes) -> bytes:
    """``pack({**payload, "events": events_bytes})``, the same bytes, with one copy of the batch.

    msgpack copied a batch (~1.9 MB at the message level) twice: into the Packer's buffer, grown
    for it, then out into the bytes it returns. Here the map is packed with an empty ``events``
    (its last two bytes: bin 8 of length 0), and the batch joined behind its real bin header."""
    head = pack({**payload, "events": b""})
    length = len(events_bytes)
    if length <= 0xFF:
        bin_header = BIN8.pack(0xC4, length)
    elif length <= 0xFFFF:
        bin_header = BIN16.pack(0xC5, length)
    else:
        bin_header = BIN32.pack(0xC6, length)
    return b"".join((memoryview(head)[:-2], bin_header, events_bytes))


def events_level(events_bytes: bytes, count: int) -> int:
    """The zstd level of an EVENTS frame: ZSTD_LEVEL_EVENTS_HEAVY for batches of EVENT_BYTES_HEAVY
    or more bytes an event, ZSTD_LEVEL_EVENTS otherwise."""
    if count > 0 and len(events_bytes) >= EVENT_BYTES_HEAVY * count:
        return ZSTD_LEVEL_EVENTS_HEAVY
    return ZSTD_LEVEL_EVENTS


__all__ = [
    "EVENT_BYTES_HEAVY",
    "ZSTD_LEVEL_EVENTS",
    "ZSTD_LEVEL_EVENTS_HEAVY",
    "events_level",
    "pack_events_payload",
]
