"""Whether a recording's frames fit together: batch numbering, and stored events against the chain.

Checksums say a frame's bytes are the ones someone wrote; they say nothing about whether the
frames belong together. A crashed file has no index, so nothing but the frames themselves says
that the EVENTS frames are complete and in order: with one dropped or two swapped, a reader that
looks batches up by their first event number would find "no events after the gap" and a replay
would call the rest unverified and still say verified. Two checks, both without re-executing:

* :func:`order_problems`: in file order, each batch of a branch starts where the previous one
  ended (``first == previous.first + previous.count``), the main run's first batch at event 0, and
  only a branch's last batch is partial. Any gap, overlap, duplicate or reordering is named.
* :func:`stored_chain_problem`: the hash chain recomputed from the *stored* event bytes
  (``xxh3_128(previous digest ++ events)``) equals the digest stored with every batch. A replay
  then compares the re-executed digests with the same stored digests, so together they say the
  stored bytes are the events the code produces.
"""

from __future__ import annotations

from typing import Any, Protocol

from timetravel.recording.catalog import MAIN_BRANCH, EventBatchInfo
from timetravel.sim.kernel import CHAIN_DIGEST_INITIAL, chain_digest_after


class RecordingReader(Protocol):
    """What the checks read of a recording (recording/reader.py's RecordingReader is one)."""

    catalog: Any

    def where(self, offset: int, *, with_path: bool = ...) -> str: ...

    def events_bytes(self, batch: EventBatchInfo) -> bytes: ...


PROBLEMS_SHOWN_MAX = 3


def order_problems(
    batches: list[EventBatchInfo], *, starts_at_zero: bool
) -> list[tuple[EventBatchInfo, str]]:
    """(batch, sentence) for each batch that does not follow the one before it in file order."""
    problems: list[tuple[EventBatchInfo, str]] = []
    expected = 0 if starts_at_zero else (batches[0].first if batches else 0)
    last_position = {batch.first: position for position, batch in enumerate(batches)}
    seen: set[int] = set()
    for position, batch in enumerate(batches):
        if batch.first > expected and last_position.get(expected, -1) > position:
            problems.append(
                (
                    batch,
                    f"out of order: the batch of events #{batch.first + 1}.. comes before the one of #{expected + 1}..",
                )
            )
        elif batch.first > expected:
            problems.append((batch, f"a gap: events #{expected + 1}..#{batch.first} have no EVENTS frame"))
        elif batch.first < expected:
            what = (
                "a duplicate" if any(b.first == batch.first for b in batches[:position]) else "out of order"
            )
            problems.append(
                (batch, f"{what}: the batch of events #{batch.first + 1}.. follows one ending at #{expected}")
            )
        if batch.partial and position != len(batches) - 1:
            problems.append((batch, f"the partial batch of events #{batch.first + 1}.. is not the last"))
        expected = max(expected, batch.first + batch.count)
        seen.add(batch.first)
    return problems


def structure_warnings(reader: RecordingReader) -> list[str]:
    """Sentences naming every branch whose EVENTS frames have gaps, duplicates or are out of order."""
    lines = []
    for branch, batches in reader.catalog.events.items():
        problems = order_problems(batches, starts_at_zero=branch == MAIN_BRANCH)
        for batch, sentence in problems[:PROBLEMS_SHOWN_MAX]:
            lines.append(
                f"the event batches of branch {branch!r} are inconsistent at {reader.where(batch.offset, with_path=False)}: {sentence}"
            )
        if len(problems) > PROBLEMS_SHOWN_MAX:
            lines.append(
                f"... and {len(problems) - PROBLEMS_SHOWN_MAX} more inconsistencies in branch {branch!r}"
            )
    return lines


def stored_chain_problem(
    reader: RecordingReader, batches: list[EventBatchInfo]
) -> tuple[EventBatchInfo, str] | None:
    """The first batch (in event order, a branch's lineage) whose stored events do not hash to its
    stored digest from the one before; None when the whole chain holds."""
    previous = CHAIN_DIGEST_INITIAL
    for batch in batches:
        data = reader.events_bytes(batch)
        digest = chain_digest_after(previous, data)
        if digest != batch.digest:
            return (
                batch,
                f"the stored events of batch #{batch.first + 1}..#{batch.first + batch.count} do not hash to "
                "its stored chain digest (the events were changed after they were recorded)",
            )
        previous = batch.digest
    return None
