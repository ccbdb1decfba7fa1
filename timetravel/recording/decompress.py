"""zstd decompression of untrusted frames, with every size checked before the work is done.

python-zstandard's one-shot ``decompress`` trusts the content size a zstd frame declares and
allocates it, ignoring ``max_output_size``: a 236 KB frame declaring 2 GiB took 2.1 GiB before the
length check could refuse it, and one declaring 64 GiB ended in a MemoryError. So:

* a frame that declares its content size must declare exactly the raw length the frame header
  states (which the reader has already checked against the frame type's cap), before anything is
  decompressed;
* a frame that does not declare it is streamed, and reading stops one byte past the stated
  length;
* the decoder's window is capped (``WINDOW_BYTES_MAX``), so a frame cannot ask for a huge
  history buffer either.
"""

from __future__ import annotations

import zstandard

WINDOW_BYTES_MAX = 1 << 27
"""The largest zstd window a recording may use (the writer's levels use a few MiB)."""
STREAM_CHUNK_BYTES = 1 << 20


class DecompressError(Exception):
    """The zstd payload is not what its frame header says (the message says how)."""


def decompress(stored: bytes, raw_length: int) -> bytes:
    """The ``raw_length`` bytes that ``stored`` (one zstd frame) decompresses to; raises DecompressError."""
    try:
        parameters = zstandard.get_frame_parameters(stored)
    except zstandard.ZstdError as error:
        raise DecompressError(f"zstd frame header does not decode: {error}") from None
    declared = parameters.content_size
    if declared != zstandard.CONTENTSIZE_UNKNOWN and declared != raw_length:
        raise DecompressError(f"the zstd frame declares {declared} bytes, the frame header says {raw_length}")
    if parameters.window_size > WINDOW_BYTES_MAX:
        raise DecompressError(f"the zstd frame asks for a {parameters.window_size}-byte window")
    decompressor = zstandard.ZstdDecompressor(max_window_size=WINDOW_BYTES_MAX)
    try:
        if declared != zstandard.CONTENTSIZE_UNKNOWN:
            raw = decompressor.decompress(stored, max_output_size=raw_length)
        else:
            raw = _stream(decompressor, stored, raw_length)
    except zstandard.ZstdError as error:
        raise DecompressError(f"zstd payload does not decode: {error}") from None
    if len(raw) != raw_length:
        raise DecompressError(f"payload is {len(raw)} bytes, the header says {raw_length}")
    return raw


def _stream(decompressor: zstandard.ZstdDecompressor, stored: bytes, raw_length: int) -> bytes:
    """Decompress a frame of unknown content size, stopping one byte past ``raw_length``."""
    chunks = []
    held = 0
    with decompressor.stream_reader(stored) as reader:
        while held <= raw_length:
            chunk = reader.read(min(STREAM_CHUNK_BYTES, raw_length + 1 - held))
            if not chunk:
                break
            chunks.append(chunk)
            held += len(chunk)
    if held > raw_length:
        raise DecompressError(f"payload is more than the {raw_length} bytes the header says")
    return b"".join(chunks)
