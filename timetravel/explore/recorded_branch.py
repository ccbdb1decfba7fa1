"""What one branch of a recording says, read without re-executing anything: its snapshots and event
batches (its parent's before the fork), its end, its events, metrics and failures.

:class:`RecordedBranch` is the part of a :class:`~timetravel.explore.session.Session` that reads
the recording; the Session adds the cursor, its world and the seeks (explore/session.py).
"""

from __future__ import annotations

import bisect
from typing import Any

from timetravel.explore.session_data import (
    Position,
    RecordedEvent,
    RecordingInfo,
    SnapshotInfo,
    lineage,
    overrides_from,
)
from timetravel.recording.catalog import EventBatchInfo, ManifestInfo
from timetravel.recording.reader import RecordingReader
from timetravel.scenarios import UnknownScenarioError


class RecordedBranch:
    """Branch ``branch`` of the recording ``reader`` reads (the catalog as it was read)."""

    def __init__(self, reader: RecordingReader, branch: str) -> None:
        self.reader = reader
        self.branch = branch
        self.display_unit: str = reader.header["display_unit"]
        self._read_branch()

    def _read_branch(self) -> None:
        """Read what the branch sees from the reader's catalog (again after ``reader`` changed)."""
        reader = self.reader
        self.header = reader.header
        self._manifests, self._batches, self.fork_events = lineage(reader, self.branch)
        self._branch_overrides = overrides_from(
            reader.catalog.branches.get(self.branch, {}).get("overrides", [])
        )
        if not self._manifests:
            raise UnknownScenarioError(f"{reader.path}: branch {self.branch!r} has no snapshot to start from")
        self._batch_firsts = [batch.first for batch in self._batches]
        self._end = self._find_end()
        self.info = self._info()

    def _find_end(self) -> Position:
        end = self.reader.end(self.branch)
        if end is not None:
            return Position(self.branch, int(end["events"]), int(end["t_end_ns"]))
        last_snapshot = self._manifests[-1]
        last_event = self._batches[-1].first + self._batches[-1].count if self._batches else 0
        if last_event <= last_snapshot.events:
            return Position(self.branch, last_snapshot.events, last_snapshot.t_ns)
        return Position(self.branch, last_event, self.reader.events(self._batches[-1])[-1].t)

    def _info(self) -> RecordingInfo:
        header = self.header
        end = self.reader.end(self.branch)
        return RecordingInfo(
            path=str(self.reader.path),
            scenario=header["scenario"],
            config=header["config"],
            seed=header["seed"],
            display_unit=self.display_unit,
            timetravel_version=str(header.get("timetravel", "?")),
            format=list(header.get("format", [])),
            code_fingerprint=str(header.get("code_fingerprint", "")),
            platform_fingerprint=str(header.get("platform_fingerprint", "")),
            snapshot_every_events=int(header.get("snapshot_every_events", 0)),
            events=self._end.events,
            t_end_ns=self._end.t_ns,
            outcome=end["outcome"] if end else None,
            failure=end["failure"] if end else None,
            complete=end is not None and self.reader.truncation is None,
            loss=self.reader.describe_loss(self.branch),
            in_progress=self.reader.branch_in_progress(self.branch),
        )

    @property
    def end(self) -> Position:
        return self._end

    def snapshots(self) -> list[SnapshotInfo]:
        return [SnapshotInfo(m.index, m.events, m.t_ns, m.state_hash, m.final) for m in self._manifests]

    @property
    def event_batches(self) -> list[EventBatchInfo]:
        """The recorded event batches this branch sees (its parent's before the fork)."""
        return list(self._batches)

    def event(self, number: int) -> RecordedEvent | None:
        """Recorded event #``number`` (None when it is not in the recording)."""
        position = bisect.bisect_left(self._batch_firsts, number) - 1
        if number < 1 or position < 0:
            return None
        batch = self._batches[position]
        if not batch.first < number <= batch.first + batch.count:
            return None
        event = self.reader.events(batch)[number - batch.first - 1]
        return RecordedEvent(number, event.t, event.seq, event.dst, event.kind, event.payload)

    def failures(self) -> list[dict[str, Any]]:
        return [failure for failure in self.reader.catalog.failures if failure.get("branch") == self.branch]

    def metric_names(self) -> list[str]:
        return [str(name) for name, _length, _chunks in self.reader.manifest(self._manifests[-1])["metrics"]]

    def metric_series(self, name: str) -> list[list[Any]]:
        """Every point ``[t_ns, node, value]`` of a metric over the whole recorded run."""
        for series_name, _length, chunks in self.reader.manifest(self._manifests[-1])["metrics"]:
            if series_name == name:
                points: list[list[Any]] = []
                for chunk in chunks:
                    points.extend(self.reader.value(chunk))
                return points
        raise KeyError(f"no metric {name!r} (known: {', '.join(self.metric_names()) or 'none'})")

    @property
    def snapshots_info(self) -> list[ManifestInfo]:
        """The recorded snapshots this branch sees (its parent's before the fork), as the catalog has them."""
        return list(self._manifests)


__all__ = ["RecordedBranch"]
