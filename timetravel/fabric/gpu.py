"""GPU streams per rank: launch kernels, record events, make streams wait, hear of completions.

The model follows CUDA's stream semantics, because that is where real training bugs live:

* ``launch(ctx, stream, name, duration_ns, reads, writes, done_kind, payload)`` queues a kernel.
  Work on one stream runs FIFO; a kernel starts when everything queued before it on its stream is
  done. When it finishes the node gets an event of kind ``done_kind`` (payload ``payload``), if one
  is given. ``duration_ns=None`` makes an *open* kernel (a communication kernel whose length the
  network decides): it runs until the node calls ``finish(ctx, stream)``; ``started_kind`` tells
  the node when such a kernel starts, so it can begin its message exchange.
* ``record(ctx, stream, event)`` queues an event record: the event completes when all work queued
  before it on that stream is done. Recording again re-arms the event (``cudaEventRecord``).
* ``wait(ctx, stream, event)`` makes work queued afterwards on ``stream`` wait for the record of
  ``event`` that was the latest *when wait was called* (``cudaStreamWaitEvent``); waiting on an
  event never recorded does not block, as in CUDA.

**Completion order is a choice.** Kernels on different streams of one GPU contend for its SMs, so
which of two overlapping kernels finishes first is not decided by their nominal durations alone.
When a kernel starts while another stream of the rank runs a timed kernel, a choice at site
``gpu.order`` (one per such pair) keeps the nominal order (value 0) or flips it (value 1): the one
that would finish first is pushed to finish 1 ns after the other. A kernel's effects are visible
when it completes (do its maths in the ``done_kind`` handler), so a missing wait bites exactly on
the seeds where the order flips, and the happens-before race detector (race.py) catches it on every
seed unless ``race_detector=off``.

**Data, not objects.** All of it lives in the node's state under ``state["gpu"]`` (streams, their
queues and vector clocks, events, buffer accesses), so snapshots and branches carry it. A completion
is one internal event of kind ``gpu.done`` carrying ``[epoch, stream, ticket]``; a crash bumps the
epoch and a rescheduled completion gets a new ticket, so a stale event is recognised and ignored.
The fabric's ``gpu.done`` handler (merged into the scenario's table by ``with_handlers``) advances
the streams and then calls the scenario's ``done_kind`` handler directly, in the same event.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from timetravel.fabric import gpu_streams, speedups
from timetravel.fabric.gpu_streams import (
    DONE_KIND,
    GPU_KEY,
    STREAMS_MAX,
    event_entry,
    gpu_of,
    report_unhandled,
    stream_of,
)
from timetravel.fabric.race import join
from timetravel.sim.event import Event

if TYPE_CHECKING:
    from timetravel.sim.context import Context
    from timetravel.sim.scenario import Handler


def new_gpu_state(epoch: int = 0, compute_factor: float = 1.0) -> dict[str, Any]:
    """An idle GPU: no streams yet (they are created on first use), no events, no tracked buffers."""
    return {
        "epoch": epoch,
        "tickets": 0,
        "compute_factor": compute_factor,
        "streams": {},
        "events": {},
        "host_clock": [],
        "access": {},
    }


def reset_gpu(state: dict[str, Any]) -> None:
    """Forget all GPU work (a crash): queued kernels are lost, pending completions become stale."""
    gpu = state[GPU_KEY]
    state[GPU_KEY] = new_gpu_state(gpu["epoch"] + 1, gpu["compute_factor"])


# -- the host-side API --------------------------------------------------------------------------


def launch(
    ctx: Context,
    stream: str,
    name: str,
    duration_ns: int | None,
    reads: Iterable[str] = (),
    writes: Iterable[str] = (),
    done_kind: str | None = None,
    payload: Any = None,
    started_kind: str | None = None,
) -> None:
    """Queue kernel ``name`` on ``stream`` (see the module docstring); ``duration_ns=None`` is an open kernel."""
    engine = _engine
    if (
        engine is not None
        and engine.gpu_launch(ctx, stream, name, duration_ns, reads, writes, done_kind, payload, started_kind)
        is None
    ):
        return
    _launch_python(ctx, stream, name, duration_ns, reads, writes, done_kind, payload, started_kind)


def _launch_python(
    ctx: Context,
    stream: str,
    name: str,
    duration_ns: int | None,
    reads: Iterable[str],
    writes: Iterable[str],
    done_kind: str | None,
    payload: Any,
    started_kind: str | None,
) -> None:
    if duration_ns is not None and (type(duration_ns) is not int or duration_ns < 0):
        raise ValueError(
            f"kernel {name!r}: duration must be a non-negative int of ns or None, got {duration_ns!r}"
        )
    gpu = ctx.state.get(GPU_KEY) or gpu_of(ctx)
    queue_stream = gpu["streams"].get(stream) or stream_of(gpu, stream)
    gpu_streams.enqueue_and_pump(
        gpu,
        queue_stream,
        {
            "op": "kernel",
            "name": name,
            "duration_ns": duration_ns,
            "reads": list(reads),
            "writes": list(writes),
            "done_kind": done_kind,
            "payload": payload,
            "started_kind": started_kind,
            "host_clock": list(gpu["host_clock"]),
        },
        ctx,
    )


def record(ctx: Context, stream: str, event: str) -> None:
    """Queue a record of ``event`` on ``stream``: it completes when the work queued before it is done."""
    engine = _engine
    if engine is not None and engine.gpu_record(ctx, stream, event) is None:
        return
    _record_python(ctx, stream, event)


def _record_python(ctx: Context, stream: str, event: str) -> None:
    gpu = gpu_of(ctx)
    queue_stream = stream_of(gpu, stream)
    events = gpu["events"]
    entry = events.get(event) or event_entry(events, event)
    entry["recorded"] += 1
    entry["pending"].append(entry["recorded"])
    gpu_streams.enqueue_and_pump(
        gpu, queue_stream, {"op": "record", "event": event, "generation": entry["recorded"]}, ctx
    )


def wait(ctx: Context, stream: str, event: str) -> None:
    """Make work queued on ``stream`` after this call wait for the latest record of ``event``."""
    engine = _engine
    if engine is not None and engine.gpu_wait(ctx, stream, event) is None:
        return
    _wait_python(ctx, stream, event)


def _wait_python(ctx: Context, stream: str, event: str) -> None:
    gpu = gpu_of(ctx)
    queue_stream = stream_of(gpu, stream)
    entry = gpu["events"].get(event)
    generation = entry["recorded"] if entry is not None else 0
    blocked = entry is not None and generation in entry["pending"]
    gpu_streams.enqueue_and_pump(
        gpu, queue_stream, {"op": "wait", "event": event, "generation": generation}, ctx, not blocked
    )


def finish(ctx: Context, stream: str, name: str | None = None) -> None:
    """End the open kernel running on ``stream`` now; its completion follows as its own event."""
    gpu = gpu_of(ctx)
    queue_stream = gpu["streams"].get(stream)
    running = queue_stream["running"] if queue_stream is not None else None
    if running is None or running["end_ns"] is not None:
        raise ValueError(f"stream {stream!r} on {ctx.node} runs no open kernel to finish")
    if name is not None and running["name"] != name:
        raise ValueError(f"stream {stream!r} on {ctx.node} runs {running['name']!r}, not {name!r}")
    running["end_ns"] = ctx.now
    ctx.deliver(ctx.now, ctx.node, DONE_KIND, [gpu["epoch"], stream, running["ticket"]])


def schedule_finish(ctx: Context, node: str, stream: str, name: str, t_ns: int) -> bool:
    """End the open kernel ``name`` running on ``node``'s ``stream`` at ``t_ns`` (False: none runs).

    For a collective-level fabric that knows, when a collective resolves, when it completes on
    every member: the completion is the kernel's own ``gpu.done`` event, as :func:`finish` would
    deliver it at that time, without a second event to call ``finish``. The node's state is only
    read here; the kernel stays open (``end_ns`` None) until its completion runs.
    """
    gpu = ctx.world.nodes[node].get(GPU_KEY)
    if gpu is None:
        return False
    queue_stream = gpu["streams"].get(stream)
    running = queue_stream["running"] if queue_stream is not None else None
    if running is None or running["end_ns"] is not None or running["name"] != name:
        return False
    ctx.deliver(t_ns, node, DONE_KIND, [gpu["epoch"], stream, running["ticket"]])
    return True


def schedule_finishes(
    ctx: Context, nodes: list[str], stream: str, name: str, times_ns: list[int], kind: str, payload: Any
) -> None:
    """:func:`schedule_finish` for each of ``nodes`` at its time in ``times_ns``, in order; a node
    that runs no such kernel gets an event ``kind`` (``payload``) at that time instead.

    For a collective that resolves for all its members at once: in C when the core is built (one
    call for the whole collective, not five dict reads and a Python call per member), the same
    deliveries in the same order either way.
    """
    if len(nodes) != len(times_ns):
        raise ValueError(f"{len(nodes)} nodes but {len(times_ns)} completion times")
    engine = _engine
    if (
        engine is not None
        and engine.gpu_schedule_finishes(ctx, nodes, stream, name, times_ns, kind, payload, schedule_finish)
        is not NotImplemented
    ):
        return
    for node, t_ns in zip(nodes, times_ns, strict=True):
        if not schedule_finish(ctx, node, stream, name, t_ns):
            ctx.deliver(t_ns, node, kind, payload)


def running_kernel(state: Mapping[str, Any], stream: str) -> str | None:
    """Name of the kernel running on ``stream`` now, or None."""
    queue_stream = state[GPU_KEY]["streams"].get(stream)
    running = queue_stream["running"] if queue_stream is not None else None
    return running["name"] if running is not None else None


def event_done(state: Mapping[str, Any], event: str) -> bool:
    """``cudaEventQuery``: True when the latest record of ``event`` has completed (or it was never recorded)."""
    entry = state[GPU_KEY]["events"].get(event)
    return entry is None or not entry["pending"] or entry["recorded"] not in entry["pending"]


def idle(state: Mapping[str, Any]) -> bool:
    """True when no stream of this GPU has work running or queued."""
    return all(s["running"] is None and not s["queue"] for s in state[GPU_KEY]["streams"].values())


_engine: Any = speedups.compiled
"""Fabric's compiled module when it is built (fabric/speedups.py): :func:`launch`, :func:`record`,
:func:`wait` and the ``gpu.done`` handler run its twins of their Python bodies (``_launch_python``,
...), which hand back NotImplemented for whatever they leave to Python (a stream or event used for
the first time, a bad argument, a full queue: Python creates or raises as it always did, nothing
changed before). None runs the Python bodies; tests set it to None to compare the two."""


def make_done_handler(table: Mapping[str, Handler]) -> Handler:
    """The ``gpu.done`` handler for one role: advance the streams, then call ``table[done_kind]``.

    With fabric's compiled code built, the handler is its ``gpu_done_entry`` bound to the table and to
    the Python handler below (a ``functools.partial``: a C call, no Python frame, 4 times a rank and
    step of dp_training): it runs the compiled ``gpu_done`` while ``_engine`` is the compiled module,
    and the Python handler otherwise or for its NotImplemented, as the Python handler alone would.
    """

    def on_gpu_done(state: dict[str, Any], event: Event, ctx: Context) -> None:
        engine = _engine
        if engine is not None and engine.gpu_done(table, state, event, ctx) is not NotImplemented:
            return
        epoch, stream_name, ticket = event.payload
        gpu = state.get(GPU_KEY)
        if gpu is None or gpu["epoch"] != epoch:
            return
        stream = gpu["streams"].get(stream_name)
        running = stream["running"] if stream is not None else None
        if running is None or running["ticket"] != ticket:
            return
        stream["running"] = None
        done_kind = running["done_kind"]
        if done_kind is not None:
            join(gpu["host_clock"], stream["clock"])
        gpu_streams.pump_after_completion(gpu, stream, ctx)
        if done_kind is None:
            return
        handler = table.get(done_kind)
        if handler is None:
            report_unhandled(ctx, running, done_kind)
            return
        done_event = Event(event.t, event.seq, event.dst, done_kind, running["payload"])
        ctx.event = done_event
        handler(state, done_event, ctx)

    compiled = speedups.compiled
    if compiled is None:
        return on_gpu_done
    entry: Handler = functools.partial(compiled.gpu_done_entry, table, on_gpu_done)
    return entry


def _compiled_entries() -> tuple[Any, Any, Any]:
    """:func:`launch`, :func:`record` and :func:`wait` as fabric's compiled entries, or as above.

    A scenario's handler calls ``fabric.launch`` eight times a rank and step (with ``record`` and
    ``wait``); as Python functions, each call bound its keywords in a frame and called the engine's
    ``gpu_launch`` from there, ~500 instructions before any work. The entries (fabric/_speedups_entry.h)
    are C functions taking the same arguments, keywords included, that run what the Python
    functions above run: the compiled body while ``_engine`` is the compiled module, the Python body
    (``_launch_python``, ...) for its NotImplemented or when ``_engine`` is None (tests set it), and
    the Python function itself for anything else, a call it would refuse included (its TypeError).
    """
    compiled = speedups.compiled
    if compiled is None:
        return _PYTHON_ENTRIES
    compiled.configure_entries(
        globals(),
        *_PYTHON_ENTRIES,
        _launch_python,
        _record_python,
        _wait_python,
        STREAMS_MAX,
        gpu_streams.GPU_EVENTS_MAX,
    )
    return compiled.launch, compiled.record, compiled.wait


_PYTHON_ENTRIES = (launch, record, wait)
"""The Python functions :func:`launch`, :func:`record` and :func:`wait` (the reference; the
compiled entries hand them every call they do not run themselves)."""

if not TYPE_CHECKING:  # mypy checks the calls against the Python functions' signatures
    launch, record, wait = _compiled_entries()
