"""The happens-before race detector over one rank's GPU streams.

Each stream of a rank has a vector clock with one entry per stream *of that rank* (never a global
clock: at 10,000 ranks that would cost gigabytes, and streams of different ranks share no memory).
A stream ticks its own entry when a kernel starts; an ``record`` captures the stream's clock in the
event; a ``wait`` joins the event's clock into the waiting stream's; a completion the host is told
about (a kernel's ``done_kind``) joins that stream's clock into the host's, and everything the host
launches afterwards carries the host's clock. So "A happens before B" is exactly "an ordering edge
a CUDA program would have": same stream, record/wait, or host synchronization.

Per buffer the detector keeps the last write (stream, tick, kernel) and the last read of each
stream (FastTrack's read set; the latest read of a stream stands for the earlier ones because they
are ordered by the stream). A kernel that reads a buffer must be ordered after its last write; a
kernel that writes it must be ordered after its last write and after every recorded read. When
not, the run fails with kind ``race``, naming both kernels, both streams and the buffer, and the
signature ``race:gpu.race.<buffer>`` buckets it by buffer. Timing plays no part: a missing wait is
caught on every seed, whether or not the completion order happens to bite on this one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from timetravel.sim.context import Context

TRACKED_BUFFERS_MAX = 100_000
"""Bound on the buffers whose accesses one rank tracks."""


def join(into: list[int], other: list[int]) -> None:
    """``into = max(into, other)`` entry by entry (clocks grow as streams are created)."""
    if into == other:  # common on the hot path (a host clock joined twice), and one C comparison
        return
    if len(into) < len(other):
        into.extend([0] * (len(other) - len(into)))
    for index, value in enumerate(other):
        if value > into[index]:
            into[index] = value


def check_kernel(
    gpu: dict[str, Any],
    stream_name: str,
    stream: dict[str, Any],
    kernel: str,
    reads: list[str],
    writes: list[str],
    ctx: Context,
) -> None:
    """Check a starting kernel's accesses against earlier ones and record them; fail on the first race.

    The pure-Python reference of fabric's compiled ``check_kernel`` (fabric/_speedups_gpu_race.h), which
    runs at every kernel start of every rank (40,000 times a step at 10,000 ranks).
    """
    access = gpu["access"]
    index = stream["index"]
    clock = stream["clock"]
    mine = [index, clock[index], kernel]
    for buffer in reads:
        entry = access.get(buffer) or _entry(access, buffer)
        if _unordered(entry["write"], index, clock):
            _report(ctx, gpu, buffer, entry["write"], "wrote", kernel, stream_name, "reads")
            return
        entry["reads"][stream_name] = mine
    for buffer in writes:
        entry = access.get(buffer) or _entry(access, buffer)
        for position, other in enumerate([entry["write"], *entry["reads"].values()]):
            if _unordered(other, index, clock):
                verb = "wrote" if position == 0 else "read"
                _report(ctx, gpu, buffer, other, verb, kernel, stream_name, "writes")
                return
        entry["write"] = mine
        entry["reads"] = {}


def _unordered(other: list[Any] | None, index: int, clock: list[int]) -> bool:
    """An access ``[stream index, tick, kernel]`` by another stream that is not ordered before the
    kernel: its tick is above the kernel's clock entry for that stream (0 past the clock's end)."""
    if other is None or other[0] == index:
        return False
    return bool(other[1] > (clock[other[0]] if other[0] < len(clock) else 0))


def _entry(access: dict[str, Any], buffer: str) -> dict[str, Any]:
    entry = access.get(buffer)
    if entry is None:
        if len(access) >= TRACKED_BUFFERS_MAX:
            raise ValueError(f"a rank tracks at most {TRACKED_BUFFERS_MAX} buffers for the race detector")
        entry = access[buffer] = {"write": None, "reads": {}}
    return entry


def _report(
    ctx: Context,
    gpu: dict[str, Any],
    buffer: str,
    earlier: list[Any],
    earlier_verb: str,
    kernel: str,
    stream_name: str,
    verb: str,
) -> None:
    earlier_stream = list(gpu["streams"])[earlier[0]]
    message = (
        f"stream race on buffer {buffer!r}: kernel {kernel!r} on stream {stream_name!r} {verb} it "
        f"with no ordering edge after kernel {earlier[2]!r} on stream {earlier_stream!r} {earlier_verb} it "
        f"(no record/wait or host synchronization between them)"
    )
    ctx.fail("race", message, site=f"gpu.race.{buffer}")
