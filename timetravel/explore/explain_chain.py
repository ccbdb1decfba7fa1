"""The causal chain of one failure, searched event by event (the steps: explore/explain.py's
docstring): the detector, the messages back to the failure's node, the onset of its unusual keys,
the inputs that led there, and the fault records at the roots. ``explain()`` decides what runs
(a torch run without ``--script`` reads the recording instead) and turns the chain into its result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from timetravel.explore.explain_results import (
    LINK_DETECTOR,
    LINK_FAULT,
    LINK_MESSAGE,
    LINK_ROOT,
    LINK_WRITE,
    ExplainLink,
    StateChange,
)
from timetravel.explore.explain_text import (
    CHANGES_PER_LINK_MAX,
    PAYLOAD_CHARS_MAX,
    clip,
    counterfactual_text,
    fault_link,
    link_changes,
    made_from_a_fault,
    peer_value,
    read_text,
    record_text,
    short,
)
from timetravel.explore.explain_text import unusual as unusual_among_peers
from timetravel.explore.explain_torch import (
    FaultCause,
    fault_causes,
    nan_entry_event,
)
from timetravel.explore.provenance import EventTrace, SeqIndex, changes_of, trace_event
from timetravel.explore.replay import ReplayDivergence
from timetravel.explore.session import Session
from timetravel.explore.stepper import Stepper, position_at_or_before
from timetravel.explore.watchpoints import last_change
from timetravel.explore.work import ExploreError, ProgressCallback, StopCheck, WorkProgress
from timetravel.sim.encoding import digest
from timetravel.sim.event import Event

LINKS_MAX = 16
TRACES_MAX = 40
"""Events re-executed with their reads noted, per explanation."""
MESSAGE_HOPS_MAX = 8
"""A value is compared with its peers only when at least this many peers have the key."""
FAULT_KIND = "fault"


class ChainBudgetSpent(Exception):
    """The chain reached a bound (links, traced events) or the caller asked to stop: incomplete."""


class ChainReached(Exception):
    """The chain reached the link it stops at (``stop_at``): complete, nothing further to trace."""


class Explainer:
    """The search for one failure's causal chain over a track (explore/explain.py's docstring: the
    detector, messages, the onset, inputs, roots), bounded by ``LINKS_MAX`` and ``TRACES_MAX``."""

    def __init__(
        self, track: Session, progress: ProgressCallback | None, should_stop: StopCheck | None
    ) -> None:
        self.track = track
        self.seqs = SeqIndex(track)
        self.traces: dict[int, EventTrace] = {}
        self.links: list[ExplainLink] = []
        self.progress = progress
        self.should_stop = should_stop
        self.stop_at: Callable[[ExplainLink], ExplainLink | None] | None = None
        """Given a link, the link to end the chain with, or None to go on (torch: the rank's call)."""
        self.complete = True
        self.roots: list[str] = []
        self._initial: dict[str, Any] | None = None
        self.fault_events: set[int] = set()
        self.pruned = 0
        self.counterfactuals = 0
        """Branches of the search that reached no fault and were left out."""
        self.torch = False
        """A torch run: faults are found from their hits (:meth:`torch_faults`), not by the peer rule."""

    def unusual(self, nodes: dict[str, Any], roles: dict[str, str], node: str, key: str) -> bool:
        """Unusual now (see :func:`unusual`) but not in the built world: a node's identity (its
        index, its neighbours) is unlike its peers' from the start and explains nothing."""
        if not unusual_among_peers(nodes, roles, node, key):
            return False
        if self._initial is None:
            world = self.track.snapshot_world(0)
            self._initial = {"nodes": world.nodes, "roles": dict(world.roles)}
        return not unusual_among_peers(self._initial["nodes"], self._initial["roles"], node, key)

    # -- tracing ---------------------------------------------------------------------------

    def trace(self, number: int) -> EventTrace:
        if number not in self.traces:
            if len(self.traces) >= TRACES_MAX:
                raise ChainBudgetSpent()
            if self.should_stop is not None and self.should_stop():
                raise ChainBudgetSpent()
            self.traces[number] = trace_event(self.track, number)
            if self.progress is not None:
                self.progress(WorkProgress("explain", len(self.traces), TRACES_MAX, f"event #{number}"))
        return self.traces[number]

    def add(self, link: ExplainLink) -> None:
        if len(self.links) >= LINKS_MAX:
            raise ChainBudgetSpent()
        last = self.stop_at(link) if self.stop_at is not None else None
        self.links.append(last or link)
        if last is not None:
            raise ChainReached()

    # -- the chain -------------------------------------------------------------------------

    def detector(self, failure: dict[str, Any]) -> EventTrace | None:
        """The first link: the event whose handler recorded the failure (None: the end-of-run checks)."""
        end = self.track.end.events
        detector = self.trace(end) if end > 0 else None
        if detector is None or not detector.failed:
            self.add(
                ExplainLink(
                    LINK_DETECTOR,
                    None,
                    failure.get("t_ns"),
                    failure.get("node") or "",
                    "end",
                    f"the end-of-run checks fired: {failure.get('message', '')}",
                )
            )
            return None
        self.add(
            ExplainLink(
                LINK_DETECTOR,
                detector.number,
                detector.event.t,
                detector.event.dst,
                detector.event.kind,
                f"the detector fired ({failure.get('kind', 'failure')})",
                link_changes(detector)[:1],
            )
        )
        return detector

    def run(self, failure: dict[str, Any]) -> None:
        detector = self.detector(failure)
        if detector is None:
            node = failure.get("node")
            end = self.track.end.events
            if node and end > 0:
                self.onset(node, end + 1)
            return
        node = failure.get("node")
        entry = nan_entry_event(self.track, failure) if self.torch and failure.get("kind") == "nan" else None
        if entry is not None and entry != detector.number:
            self.message(self.trace(entry), node)  # the node's own call into the collective, not the last
            return  # member's whose arrival let the detector see every input
        sender = self.seqs.scheduled_by(detector.event.seq)
        reporter = self.trace(sender).event.dst if sender is not None else None
        if node and node not in (detector.event.dst, reporter) and self.onset(node, detector.number):
            return  # the detector heard the last report from another rank (one merely a step ahead):
            # the node the failure names went its own way first, and its onset is the cause
        self.inputs(detector, node)

    def inputs(self, trace: EventTrace, failure_node: str | None) -> None:
        """Follow ``trace``'s unusual reads, else its messages, else stop at a root."""
        if self.fault_roots(trace):
            return
        unusual = [read for read in trace.reads if self.unusual(trace.before, trace.roles, *read)]
        at_failure_node = bool(failure_node) and trace.event.dst == failure_node
        if at_failure_node and unusual and self.onset(str(failure_node), trace.number):
            return
        for node, key in unusual:
            if self.follow_read(trace, node, key):
                return
        self.message(trace, failure_node)

    def message(self, trace: EventTrace, failure_node: str | None, hops: int = 0) -> None:
        """The event that scheduled ``trace``'s event (its message or timer)."""
        sender = self.seqs.scheduled_by(trace.event.seq)
        if sender is None:
            self.add(
                ExplainLink(
                    LINK_ROOT,
                    None,
                    0,
                    trace.event.dst,
                    trace.event.kind,
                    "scheduled when the world was built: no cause inside the simulation",
                )
            )
            return
        source = self.trace(sender)
        what = (
            f"sent {trace.event.kind} {clip(repr(trace.event.payload), PAYLOAD_CHARS_MAX)} to {trace.event.dst}"
            if source.event.dst != trace.event.dst
            else f"scheduled {trace.event.kind}"
        )
        unusual = [read for read in source.reads if self.unusual(source.before, source.roles, *read)]
        because = read_text(source, unusual) if unusual else ""
        self.add(
            ExplainLink(
                LINK_MESSAGE,
                source.number,
                source.event.t,
                source.event.dst,
                source.event.kind,
                what,
                self.unusual_changes(source)[:1],
                because,
            )
        )
        at_failure_node = bool(failure_node) and source.event.dst == failure_node
        if at_failure_node and unusual and self.onset(str(failure_node), source.number):
            return
        if unusual or hops >= MESSAGE_HOPS_MAX or self.fault_roots(source):
            for node, key in unusual:
                if self.follow_read(source, node, key):
                    return
            return
        self.message(source, failure_node, hops + 1)

    def follow_read(self, trace: EventTrace, node: str, key: str) -> bool:
        """The event that last wrote ``nodes/node/key`` before ``trace``'s event; then its inputs."""
        path = f"nodes/{node}/{key}"
        found = last_change(self.track, path, start_events=trace.number - 1)
        if not found.found or found.event is None or found.kind == "end":
            return False
        writer = self.trace(found.event)
        if self.unusual(writer.before, writer.roles, node, key):
            return False  # unusual before this write too: not where it started
        if self.fault_roots(writer):
            return True
        self.add(self.write_link(writer, node, [key], f"wrote {path}"))
        self.inputs(writer, None)
        return True

    def onset(self, node: str, before_event: int) -> bool:
        """The event on ``node`` after which its keys unusual at #``before_event`` stayed unusual."""
        probe = self.trace(before_event) if before_event <= self.track.end.events else None
        nodes = probe.before if probe is not None else self.track_world_nodes()
        roles = probe.roles if probe is not None else dict(self.track.world.roles)
        keys = [key for key in nodes.get(node, {}) if self.unusual(nodes, roles, node, key)]
        if not keys:
            return False
        onsets = self._onset_events(node, keys, before_event)
        if not onsets:
            return False
        followed = False
        for number, stayed in onsets:  # the latest first: the chain runs back in time
            writer = self.trace(number)
            if not any(changes_of(writer, f"nodes/{node}/{key}") for key in stayed):
                continue  # its peers moved on while it did not: the cause is where it did not move
            mark = len(self.links)
            try:
                self._onset_chain(writer, node, stayed)
            except ChainBudgetSpent:
                del self.links[mark:]
                raise
            if any(link.role == LINK_FAULT for link in self.links[mark:]):
                followed = True
            else:  # a branch that reaches no fault explains nothing: leave it out
                del self.links[mark:]
                self.pruned += 1
        return followed

    def _onset_chain(self, writer: EventTrace, node: str, stayed: list[str]) -> None:
        if self.fault_roots(writer):
            return
        link = self.write_link(
            writer,
            node,
            stayed,
            f"{node} alone: from here on its {', '.join(stayed)} unlike every peer's",
        )
        stayed_paths = {change.path for change in link.changes}
        others = tuple(change for change in self.unusual_changes(writer) if change.path not in stayed_paths)
        self.add(dataclasses.replace(link, changes=(*link.changes, *others)))
        self.inputs_of_onset(writer, node)

    def inputs_of_onset(self, writer: EventTrace, node: str) -> None:
        if self.fault_roots(writer):
            return
        unusual = [read for read in writer.reads if self.unusual(writer.before, writer.roles, *read)]
        for read_node, key in unusual:
            if self.follow_read(writer, read_node, key):
                return
        self.message(writer, None)

    def unusual_changes(self, trace: EventTrace) -> tuple[StateChange, ...]:
        """The event's changes to its node's keys that are unusual right after it."""
        node = trace.event.dst
        shown = []
        for change in trace.changes:
            parts = change.path.split("/")
            if (
                len(parts) >= 3
                and parts[1] == node
                and self.unusual(trace.after, trace.roles, node, parts[2])
            ):
                shown.append(StateChange(change.path, change.change, clip(change.summary)))
        return tuple(shown[:CHANGES_PER_LINK_MAX])

    def track_world_nodes(self) -> dict[str, Any]:
        self.track.goto("end")
        return self.track.world.nodes

    def _onset_events(self, node: str, keys: list[str], before_event: int) -> list[tuple[int, list[str]]]:
        """Scan back by snapshots for where ``keys`` of ``node`` became unusual, then re-execute
        from there: each event on ``node`` after which some of them stayed unusual, latest first."""
        track = self.track
        snapshots = track.snapshots()
        position = position_at_or_before(track, max(before_event - 1, 0))
        while position > 0:
            world = track.snapshot_world(position)
            if not any(self.unusual(world.nodes, world.roles, node, key) for key in keys):
                break
            position = position_at_or_before(track, snapshots[position].events - 1)
        since: dict[str, int | None] = {key: None for key in keys}
        values: dict[str, bytes] = {}
        stepper = Stepper(track, position)

        def check(event: Event) -> None:
            if event.dst != node:
                return
            world = stepper.world
            for key in keys:
                value = digest(world.nodes[node].get(key))
                if not self.unusual(world.nodes, world.roles, node, key):
                    since[key] = None
                elif since[key] is None or values.get(key) != value:
                    since[key] = world.events_processed  # unusual since here, with this value
                values[key] = value

        target = before_event - 1
        while stepper.events < target:
            ran = stepper.advance_observed(target - stepper.events, check)
            if ran == 0:
                if stepper.events == stepper.horizon < stepper.end_events:
                    stepper = Stepper.before(track, stepper.horizon)
                    continue
                break
        started = sorted({value for value in since.values() if value is not None}, reverse=True)
        return [(number, [key for key, value in since.items() if value == number]) for number in started]

    def write_link(self, trace: EventTrace, node: str, keys: list[str], what: str) -> ExplainLink:
        changes: list[StateChange] = []
        for key in keys:
            changes += [
                StateChange(c.path, c.change, clip(c.summary))
                for c in changes_of(trace, f"nodes/{node}/{key}")
            ]
        unusual = [read for read in trace.reads if self.unusual(trace.before, trace.roles, *read)]
        because = read_text(trace, unusual)
        return ExplainLink(
            LINK_WRITE,
            trace.number,
            trace.event.t,
            trace.event.dst,
            trace.event.kind,
            what,
            tuple(changes[:CHANGES_PER_LINK_MAX]),
            because,
            self.otherwise(trace, node, keys, unusual),
        )

    def otherwise(self, trace: EventTrace, node: str, keys: list[str], unusual: list[tuple[str, str]]) -> str:
        """Re-run the event with its first unusual read set to the peers' value: which of the
        link's keys it would then have written otherwise (the evidence that the read is the cause)."""
        if not unusual or len(self.traces) >= TRACES_MAX:
            return ""
        read_node, read_key = unusual[0]
        peer = peer_value(trace.before, trace.roles, read_node, read_key)
        try:
            other = trace_event(self.track, trace.number, {(read_node, read_key): peer})
        except (ReplayDivergence, ExploreError, AssertionError):
            return ""  # the counterfactual did not re-execute like the recording: no evidence either way
        self.counterfactuals += 1
        written = []
        for key in keys + [k for k in trace.after.get(node, {}) if k not in keys]:
            actual, instead = trace.after.get(node, {}).get(key), other.after.get(node, {}).get(key)
            if key.startswith("_") or digest(actual) == digest(instead):
                continue
            written.append(f"{key} {counterfactual_text(actual, instead)}")
            if len(written) >= CHANGES_PER_LINK_MAX:
                break
        if not written:
            return f"with its peers' {read_key} ({short(peer)}) it writes the same: not the cause alone"
        return f"with its peers' {read_key} ({short(peer)}) it would have written {', '.join(written)}"

    def torch_faults(self, failure: dict[str, Any], *, executes: bool = True) -> None:
        """A torch run's chain ends at the faults whose hits explain the failure (the event each
        acted in, with the collective, then its record), or at the line saying none does.
        ``executes=False``: the script may not run, the events are read from the recording."""
        causes, no_fault = fault_causes(self.track, failure, self.trace if executes else None)
        if causes and failure.get("kind") == "nan":
            self.links = [made_from_a_fault(link) for link in self.links]
        for cause in causes:
            self.fault_link(cause)
        if not causes:
            node = str(failure.get("node") or "")
            self.add(ExplainLink(LINK_ROOT, None, None, node, "the script", no_fault))

    def fault_link(self, cause: FaultCause) -> None:
        trace = cause.trace
        record = next((f for f in trace.faults if str(f.get("id")) == cause.fault_id), {})
        self.fault_events.add(trace.number)
        self.add(fault_link(trace, cause.what, because=cause.because, fault=cause.detail))
        if cause.fault_id not in self.roots:
            self.roots.append(cause.fault_id)
            self.add(self.root_link(cause.fault_id, record))

    def root_link(self, fault_id: str, record: dict[str, Any]) -> ExplainLink:
        return ExplainLink(
            LINK_ROOT,
            None,
            record.get("t_start"),
            str(record.get("target", "")),
            "fault record",
            f"{fault_id} {record_text(record)}: a fault record, no cause inside the simulation",
        )

    def fault_roots(self, trace: EventTrace) -> bool:
        """A fault event, or faults that acted during the event: their links and records (on a
        torch run :meth:`torch_faults` finds them instead, at the end of the chain)."""
        if self.torch:
            return False
        fault_ids: list[str] = []
        payload = trace.event.payload
        records = {str(f.get("id")): f for f in trace.faults}
        if trace.event.kind == FAULT_KIND and isinstance(payload, (list, tuple)) and payload:
            fault_ids.append(str(payload[0]))
        elif trace.event.kind == FAULT_KIND and isinstance(payload, dict) and "id" in payload:
            fault_ids.append(str(payload["id"]))  # a scenario's own fault event carries its record
            records.setdefault(str(payload["id"]), payload)
        fault_ids += [fault_id for fault_id in trace.faults_hit if fault_id not in fault_ids]
        if not fault_ids:
            return False
        if trace.number in self.fault_events:
            return True
        self.fault_events.add(trace.number)
        for fault_id in fault_ids:
            record = records.get(fault_id, {})
            drawn = sorted(
                {
                    c.path.split("/")[3]
                    for c in trace.changes
                    if c.path.count("/") >= 3 and c.path.split("/")[2] == "_choices"
                }
            )
            what = f"fault {fault_id} ({record.get('kind', '?')}) acted" + (
                f", drawing {', '.join(drawn)}" if drawn else ""
            )
            self.add(fault_link(trace, what.rstrip(": "), link_changes(trace, flipped=True)))
            if fault_id in self.roots:
                continue
            self.roots.append(fault_id)
            self.add(self.root_link(fault_id, record))
        return True


__all__ = ["ChainBudgetSpent", "ChainReached", "Explainer"]
