"""Export a recorded run as Chrome trace events, to open in Perfetto's UI (ui.perfetto.dev).

The run is re-executed event by event from its first snapshot (verified against the recording's
hash chain, like a seek) and written as the JSON trace event format:

* **one process per node** (a rank, with its host in the name on a fabric; any other node too),
  ordered as the world lists its nodes;
* per process, a thread ``events`` with one zero-length slice per processed event (its kind; the
  args carry the event number, seq and exact time), and **one thread per GPU stream** with a slice
  per kernel, from its start to its completion;
* **messages as flow events**: an event whose scheduler ran on another node is a message; a
  zero-length ``send`` slice on the sender at the send time starts a flow (``flow_out``, bound by
  ``bind_id``) that the receiving handler's slice ends (``flow_in``), so Perfetto draws an arrow;
* **faults as instant events** on their target (``fault f3 crash start``, the record in the args),
  and the failure as a global instant event;
* on a **torch run** (a world with a ``c10d`` node), per rank a thread ``collectives`` listed first:
  each collective a slice from the rank's entry to its completion (``t_done``), named
  ``<op> <group>#<seq>`` with its shapes, dtypes and bytes in the args, and each optimizer step an
  instant (explore/perfetto_collectives.py).

**Where the data comes from.** The kernel does not log who sent an event, but every event gets the
next ``seq`` when it is scheduled: the events a handler schedules take the seqs between the world's
counter before and after it ran. Watching that counter after each event maps any delivered event's
seq back to the event that sent it (a binary search), and so to the sender and the send time.
Events scheduled before the first snapshot (at build time) have no sender. **Kernel spans** come
from the GPU model's state: it keeps only the *running* kernel of each stream
(``state["gpu"]["streams"][name]["running"]``, with ``name`` and ``start_ns``), so after each event
the exporter compares the running kernel of every stream of the node that handled it with the one
it saw before: a new ``(name, start_ns)`` opens a span, and the old one ends at that event's time
(its ``gpu.done`` completion, or a crash that reset the GPU). The timed end a kernel was scheduled
with can move (a completion-order choice pushes it by 1 ns), so the end is read off the event that
actually completed it, never from the scheduled end.

**Time.** Trace timestamps are microseconds; Perfetto reads them as ``int64(ts * 1000)`` ns, which
truncates. Each timestamp is written as the double nearest ``t_ns / 1000`` that reads back as
exactly ``t_ns`` (the next double up when the nearest falls short), so nanosecond times survive;
the exact ``t_ns`` is in every event's args as well. Events are written sorted by time, so every
track's timestamps are monotone.

**Bounds.** At most ``trace_events_max`` trace events are written; past that the export stops at
an event boundary and says so (``truncated``).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from timetravel.explore.perfetto_collectives import (
    COLLECTIVE_NODE,
    THREADS_PER_PROCESS,
    CollectiveTracks,
    trace_records,
)
from timetravel.explore.results import ExportResult
from timetravel.explore.stepper import Stepper
from timetravel.explore.work import ProgressCallback, WorkProgress
from timetravel.recording.files import make_parent_folders
from timetravel.sim.event import Event

if TYPE_CHECKING:
    from timetravel.explore.session import Session
    from timetravel.sim.world import World

TRACE_EVENTS_MAX = 2_000_000
"""Trace events one export writes at most (a few hundred bytes each)."""
EXPORT_CHUNK_EVENTS = 4096
"""Events re-executed between two progress reports and stop checks."""
FORK_SENDER = "<fork>"
# tid = pid * THREADS_PER_PROCESS + lane: thread ids are unique across processes (Perfetto treats a
# tid as system-wide). Lane 0 is the events thread, lane 1 + i the stream of index i, lanes 50 + k a
# torch rank's collectives (explore/perfetto_collectives.py).
EVENTS_LANE = 0
GPU_KEY = "gpu"
FAULT_KIND = "fault"
FORMAT = "perfetto"


def trace_timestamp(t_ns: int) -> float:
    """Microseconds as a double that Perfetto's ``int64(ts * 1000)`` turns back into ``t_ns``."""
    ts = t_ns / 1000
    while int(ts * 1000) < t_ns:
        ts = math.nextafter(ts, math.inf)
    return ts


@dataclass
class _Open:
    """A kernel seen running on a stream: its name, start and the GPU's epoch then."""

    name: str
    start_ns: int
    epoch: int
    done_kind: str | None


@dataclass
class _Trace:
    """What the exporter gathers while it re-executes."""

    world: World
    trace_events_max: int
    events: list[dict[str, Any]] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)
    lanes: dict[tuple[str, str], int] = field(default_factory=dict)
    running: dict[str, dict[str, _Open]] = field(default_factory=dict)
    """node -> stream -> the kernel seen running there."""
    seq_after: list[int] = field(default_factory=list)
    senders: list[tuple[str, int]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"kernels": 0, "messages": 0, "faults": 0})
    collectives: CollectiveTracks | None = None
    """A torch run's collectives and optimizer steps (None: the world has no c10d node)."""

    @property
    def full(self) -> bool:
        return len(self.events) >= self.trace_events_max


def export_perfetto(
    session: Session,
    path: str | Path,
    *,
    trace_events_max: int = TRACE_EVENTS_MAX,
    progress: ProgressCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ExportResult:
    """Write the session's branch as a Chrome trace JSON file (see the module docstring)."""
    stepper = Stepper(session, 0)
    trace = _Trace(stepper.world, trace_events_max)
    _describe_processes(trace, stepper.world)
    if COLLECTIVE_NODE in stepper.world.nodes:
        trace.collectives = CollectiveTracks()
    trace.seq_after.append(stepper.world.seq)
    total = session.end.events
    truncated = False

    def observe(event: Event) -> None:
        _observe(trace, stepper.world.events_processed, event)

    while not stepper.at_end():
        if trace.full or (should_stop is not None and should_stop()):
            truncated = True
            break
        if stepper.events == stepper.horizon:
            stepper = _cross_fork(trace, stepper)
        chunk = min(EXPORT_CHUNK_EVENTS, max(1, (trace.trace_events_max - len(trace.events)) // 4))
        if stepper.advance_observed(chunk, observe) == 0:
            break
        trace.world = stepper.world
        if progress is not None:
            progress(WorkProgress("export", stepper.events, total, "events exported"))
    if not truncated:
        stepper.finish()
        trace.world = stepper.world
    else:
        stepper.verify_open_batch()
    _close_running(trace, stepper.world.t_ns, unfinished=True)
    _collective_slices(trace, stepper.world.t_ns)
    _failure(trace, stepper.world)
    document = _document(session, trace, stepper.events, truncated)
    text = json.dumps(document, separators=(",", ":"), allow_nan=False)
    target = Path(path)
    make_parent_folders(target)
    target.write_text(text)
    return ExportResult(
        path=str(target),
        format=FORMAT,
        trace_events=len(trace.events),
        bytes_written=len(text.encode()),
        events=stepper.events,
        kernels=trace.counts["kernels"],
        messages=trace.counts["messages"],
        faults=trace.counts["faults"],
        truncated=truncated,
        collectives=None if trace.collectives is None else trace.counts["collectives"],
        optimizer_steps=trace.counts.get("optimizer_steps", 0),
    )


def _cross_fork(trace: _Trace, stepper: Stepper) -> Stepper:
    """Continue from the branch's own snapshot at its fork. Events its changes scheduled there
    (added faults) have no sender: their seqs are booked to a pseudo-sender that is no node."""
    fork = stepper.horizon
    stepper = Stepper.before(stepper.session, fork)
    if stepper.events != fork:
        raise ValueError(f"branch {stepper.session.branch!r} has no snapshot at its fork (#{fork})")
    if stepper.world.seq > trace.seq_after[-1]:
        trace.seq_after.append(stepper.world.seq)
        trace.senders.append((FORK_SENDER, stepper.world.t_ns))
    trace.world = stepper.world
    return stepper


# -- processes and threads --------------------------------------------------------------------------


def _host_of(world: World, node: str) -> int | None:
    fabric = world.fabric
    rank_of, route = fabric.get("rank_of"), fabric.get("route")
    if not isinstance(rank_of, dict) or node not in rank_of or not isinstance(route, (list, tuple)):
        return None
    return int(rank_of[node]) // int(route[1])


def _describe_processes(trace: _Trace, world: World) -> None:
    for index, node in enumerate(world.nodes):
        pid = index + 1
        trace.pids[node] = pid
        host = _host_of(world, node)
        name = node if host is None else f"{node} (host {host})"
        trace.metadata += [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": index}},
        ]
        _thread(trace, node, EVENTS_LANE, "events")


def _thread(trace: _Trace, node: str, lane: int, name: str) -> int:
    pid = trace.pids[node]
    tid = pid * THREADS_PER_PROCESS + lane
    trace.metadata += [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": lane}},
    ]
    return tid


def _stream_tid(trace: _Trace, node: str, stream: str, index: int) -> int:
    key = (node, stream)
    lane = trace.lanes.get(key)
    if lane is None:
        lane = trace.lanes[key] = 1 + index
        _thread(trace, node, lane, f"stream {stream}")
    return trace.pids[node] * THREADS_PER_PROCESS + lane


def _events_tid(trace: _Trace, node: str) -> int:
    return trace.pids[node] * THREADS_PER_PROCESS + EVENTS_LANE


# -- one event --------------------------------------------------------------------------------------


def _observe(trace: _Trace, number: int, event: Event) -> None:
    world = trace.world
    trace.seq_after.append(world.seq)
    trace.senders.append((event.dst, event.t))
    if event.dst not in trace.pids:
        return
    slice_event = _handler_slice(trace, number, event)
    sender = _sender(trace, event.seq)
    if sender is not None and sender[0] != event.dst and sender[0] in trace.pids:
        _message(trace, sender, event, slice_event)
    if event.kind == FAULT_KIND:
        _fault(trace, event)
    _kernels(trace, event.dst, event.t)
    if trace.collectives is not None:
        trace.collectives.observe(world, event)


def _handler_slice(trace: _Trace, number: int, event: Event) -> dict[str, Any]:
    dropped = event.dst in trace.world.down and event.kind != FAULT_KIND
    args: dict[str, Any] = {"event": number, "seq": event.seq, "t_ns": event.t}
    if dropped:
        args["dropped"] = "the node is down"
    record = {
        "ph": "X",
        "name": event.kind + (" (dropped: node down)" if dropped else ""),
        "cat": "event",
        "ts": trace_timestamp(event.t),
        "dur": 0,
        "pid": trace.pids[event.dst],
        "tid": _events_tid(trace, event.dst),
        "args": args,
    }
    trace.events.append(record)
    return record


def _sender(trace: _Trace, seq: int) -> tuple[str, int] | None:
    """The node and time of the event that scheduled ``seq`` (None: scheduled at build time)."""
    position = bisect.bisect_right(trace.seq_after, seq)
    if position == 0 or position > len(trace.senders):
        return None
    return trace.senders[position - 1]


def _message(trace: _Trace, sender: tuple[str, int], event: Event, receive: dict[str, Any]) -> None:
    node, t_send = sender
    trace.counts["messages"] += 1
    trace.events.append(
        {
            "ph": "X",
            "name": f"send {event.kind} -> {event.dst}",
            "cat": "message",
            "ts": trace_timestamp(t_send),
            "dur": 0,
            "pid": trace.pids[node],
            "tid": _events_tid(trace, node),
            "bind_id": event.seq,
            "flow_out": True,
            "args": {"seq": event.seq, "to": event.dst, "t_ns": t_send, "arrives_ns": event.t},
        }
    )
    receive["bind_id"] = event.seq
    receive["flow_in"] = True
    receive["args"]["from"] = node
    receive["args"]["sent_ns"] = t_send


def _fault(trace: _Trace, event: Event) -> None:
    payload = event.payload
    record: Any = None
    phase = "start"
    if isinstance(payload, dict) and "id" in payload:
        record = payload
    elif isinstance(payload, (list, tuple)) and len(payload) == 2 and isinstance(payload[0], str):
        fault_id, phase = payload[0], str(payload[1])
        record = next((item for item in trace.world.faults if item.get("id") == fault_id), {"id": fault_id})
    if not isinstance(record, dict):
        return
    trace.counts["faults"] += 1
    trace.events.append(
        {
            "ph": "i",
            "s": "t",
            "name": f"fault {record.get('id', '?')} {record.get('kind', '')} {phase}".replace("  ", " "),
            "cat": "fault",
            "ts": trace_timestamp(event.t),
            "pid": trace.pids[event.dst],
            "tid": _events_tid(trace, event.dst),
            "args": {"t_ns": event.t, "phase": phase, "fault": _plain(record)},
        }
    )


def _kernels(trace: _Trace, node: str, t_ns: int) -> None:
    """Compare the running kernel of each stream of ``node`` with the one seen before."""
    gpu = trace.world.nodes[node].get(GPU_KEY)
    seen = trace.running.get(node)
    if not isinstance(gpu, dict) or (not gpu.get("streams") and not seen):
        return
    seen = trace.running.setdefault(node, {})
    streams = gpu.get("streams", {})
    epoch = gpu.get("epoch", 0)
    for name, stream in streams.items():
        running = stream.get("running")
        now = (
            None
            if running is None
            else _Open(running["name"], running["start_ns"], epoch, running.get("done_kind"))
        )
        before = seen.get(name)
        if before is not None and (
            now is None or (now.name, now.start_ns, now.epoch) != (before.name, before.start_ns, before.epoch)
        ):
            _kernel_span(trace, node, name, stream.get("index", 0), before, t_ns)
            del seen[name]
        if now is not None and name not in seen:
            seen[name] = now
            _stream_tid(trace, node, name, stream.get("index", 0))
    for name in [name for name in seen if name not in streams]:
        _kernel_span(trace, node, name, trace.lanes.get((node, name), 1) - 1, seen.pop(name), t_ns, lost=True)


def _kernel_span(
    trace: _Trace,
    node: str,
    stream: str,
    index: int,
    kernel: _Open,
    end_ns: int,
    *,
    lost: bool = False,
    unfinished: bool = False,
) -> None:
    trace.counts["kernels"] += 1
    args: dict[str, Any] = {"stream": stream, "start_ns": kernel.start_ns, "end_ns": end_ns}
    if kernel.done_kind is not None:
        args["done_kind"] = kernel.done_kind
    if lost:
        args["lost"] = "the GPU was reset (a crash)"
    if unfinished:
        args["unfinished"] = "still running when the recording ends"
    start = trace_timestamp(kernel.start_ns)
    trace.events.append(
        {
            "ph": "X",
            "name": kernel.name,
            "cat": "kernel",
            "ts": start,
            "dur": trace_timestamp(max(end_ns - kernel.start_ns, 0)),
            "pid": trace.pids[node],
            "tid": _stream_tid(trace, node, stream, index),
            "args": args,
        }
    )


def _close_running(trace: _Trace, t_ns: int, *, unfinished: bool) -> None:
    for node, streams in trace.running.items():
        for stream, kernel in streams.items():
            lane = trace.lanes.get((node, stream), 1)
            _kernel_span(trace, node, stream, lane - 1, kernel, t_ns, unfinished=unfinished)
    trace.running.clear()


def _collective_slices(trace: _Trace, end_ns: int) -> None:
    """A torch run's collectives as slices on each rank's ``collectives`` lanes, its steps as instants."""
    if trace.collectives is None:
        return
    metadata, events, counts = trace_records(trace.collectives, trace.pids, end_ns, trace_timestamp)
    trace.metadata += metadata
    trace.events += events
    trace.counts.update(counts)


def _failure(trace: _Trace, world: World) -> None:
    failure = world.failure
    if failure is None:
        return
    node = failure.get("node")
    record = {
        "ph": "i",
        "s": "g",
        "name": f"FAIL {failure['signature']}",
        "cat": "failure",
        "ts": trace_timestamp(int(failure["t_ns"])),
        "pid": trace.pids.get(node, 0) if isinstance(node, str) else 0,
        "tid": _events_tid(trace, node) if isinstance(node, str) and node in trace.pids else 0,
        "args": {"t_ns": failure["t_ns"], "node": node, "message": failure["message"]},
    }
    trace.events.append(record)


def _plain(value: Any) -> Any:
    """A JSON-able copy of a fault record (arrays and other values as short text)."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)[:80]


def _document(session: Session, trace: _Trace, events: int, truncated: bool) -> dict[str, Any]:
    ordered = sorted(trace.events, key=lambda record: record["ts"])
    info = session.info
    return {
        "traceEvents": trace.metadata + ordered,
        "displayTimeUnit": "ns",
        "otherData": {
            "producer": "timetravel export --perfetto",
            "recording": info.path,
            "scenario": info.scenario,
            "seed": info.seed,
            "branch": session.branch,
            "events": events,
            "truncated": truncated,
        },
    }
