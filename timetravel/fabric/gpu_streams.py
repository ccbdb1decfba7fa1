"""The GPU stream engine: queues per stream, kernel starts, record completions, the pump.

:mod:`timetravel.fabric.gpu` is the host-side API (launch, record, wait, finish) and the ``gpu.done``
handler; both queue operations here and let :func:`pump` advance every stream until none can move,
following CUDA's stream semantics (see that module's docstring). Everything is plain data in the
node's ``state["gpu"]``. :func:`pump` is fabric's compiled twin (fabric/_speedups_gpu_pump.h) when
it is built, handed the Python functions here for what it leaves to Python; :func:`pump_python` is
the reference.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from timetravel.fabric import race, speedups
from timetravel.fabric.race import check_kernel, join

if TYPE_CHECKING:
    from timetravel.sim.context import Context

GPU_KEY = "gpu"
"""Key of the GPU model inside a rank's node state (reserved: scenarios must not use it)."""
DONE_KIND = "gpu.done"
SITE_ORDER = "gpu.order"
STREAMS_MAX = 16
STREAM_OPS_MAX = 100_000
"""Bound on the work queued on one stream (a runaway launch loop is a bug, not a workload)."""
GPU_EVENTS_MAX = 100_000


def event_entry(events: dict[str, Any], event: str) -> dict[str, Any]:
    """The entry of ``event``, created on its first record."""
    entry = events.get(event)
    if entry is None:
        if len(events) >= GPU_EVENTS_MAX:
            raise ValueError(f"a GPU holds at most {GPU_EVENTS_MAX} named events")
        entry = events[event] = {"recorded": 0, "completed": 0, "pending": [], "clock": [], "t_ns": -1}
    return entry


def gpu_of(ctx: Context) -> dict[str, Any]:
    gpu = ctx.state.get(GPU_KEY)
    if gpu is None:
        raise KeyError(f"node {ctx.node!r} has no GPU: name it among the ranks passed to fabric.install")
    return gpu


def stream_of(gpu: dict[str, Any], name: str) -> dict[str, Any]:
    streams = gpu["streams"]
    stream = streams.get(name)
    if stream is None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a stream name is a non-empty str, got {name!r}")
        if len(streams) >= STREAMS_MAX:
            raise ValueError(f"a GPU has at most {STREAMS_MAX} streams")
        index = len(streams)
        stream = streams[name] = {"index": index, "queue": [], "running": None, "clock": [0] * (index + 1)}
    return stream


def enqueue_and_pump(
    gpu: dict[str, Any], stream: dict[str, Any], op: dict[str, Any], ctx: Context, may_move: bool = True
) -> None:
    """Queue ``op`` on ``stream``, then advance the streams as :func:`pump` does.

    Between two calls into the engine every stream is at rest (:func:`pump` ran to a fixpoint:
    each stream runs a kernel, is empty, or waits on a record still pending). Queuing behind a
    running kernel or behind a blocked wait moves nothing, so the pump, which would find every
    stream at rest, is skipped: only an op queued on an idle, empty stream can start at once.
    Same operations in the same order; 4 of a dp_training step's 8 host-side pumps are saved.
    Likewise a completion frees only its own stream: with nothing queued on it, nothing can move
    (2 of the step's 4 completions). And a wait on a record still pending (``may_move`` False)
    blocks its stream at once: queued on an idle stream it moves nothing either (the step's two
    waits; the pump that found so cost ~3,500 instructions each in C).
    """
    queue = stream["queue"]
    if len(queue) >= STREAM_OPS_MAX:
        raise ValueError(f"more than {STREAM_OPS_MAX} operations queued on one stream")
    queue.append(op)
    if may_move and stream["running"] is None and len(queue) == 1:
        pump(gpu, ctx)


def pump_after_completion(gpu: dict[str, Any], stream: dict[str, Any], ctx: Context) -> None:
    """A kernel of ``stream`` completed: only that stream can move now, and only if work is queued
    on it (see :func:`enqueue_and_pump`)."""
    if stream["queue"]:
        pump(gpu, ctx)


def pump_python(gpu: dict[str, Any], ctx: Context) -> None:
    """Advance every stream until none can move (the reference; :data:`pump` is what runs).

    Only a completed record can unblock another stream (a wait); a kernel start or a wait taken
    cannot. So another pass over the streams is needed only after a pass completed a record: the
    same operations in the same order as passing until nothing moves, without the idle passes.
    """
    streams = gpu["streams"]
    again = True
    while again:
        again = False
        for name, stream in streams.items():
            if stream["running"] is None and stream["queue"] and _advance(gpu, name, stream, ctx):
                again = True


def _advance(gpu: dict[str, Any], name: str, stream: dict[str, Any], ctx: Context) -> bool:
    """Run ``stream`` forward as far as it goes; True when it completed a record on the way."""
    queue = stream["queue"]
    recorded = False
    while stream["running"] is None and queue:
        op = queue[0]
        kind = op["op"]
        if kind == "wait":
            entry = gpu["events"].get(op["event"])
            if entry is not None and op["generation"] in entry["pending"]:
                break
            queue.pop(0)
            if entry is not None:
                join(stream["clock"], entry["clock"])
        elif kind == "record":
            queue.pop(0)
            _complete_record(gpu["events"][op["event"]], op["generation"], stream, ctx.now)
            recorded = True
        else:
            queue.pop(0)
            _start_kernel(gpu, name, stream, op, ctx)
    return recorded


def _complete_record(entry: dict[str, Any], generation: int, stream: dict[str, Any], now: int) -> None:
    entry["pending"].remove(generation)
    if generation > entry["completed"]:
        entry["completed"] = generation
        entry["clock"] = list(stream["clock"])
        entry["t_ns"] = now


def _start_kernel(
    gpu: dict[str, Any], name: str, stream: dict[str, Any], op: dict[str, Any], ctx: Context
) -> None:
    clock = stream["clock"]
    index = stream["index"]
    join(clock, op["host_clock"])
    if len(clock) <= index:
        clock.extend([0] * (index + 1 - len(clock)))
    clock[index] += 1
    if (op["reads"] or op["writes"]) and ctx.world.fabric.get("race_detector", True):
        check_kernel(gpu, name, stream, op["name"], op["reads"], op["writes"], ctx)
    gpu["tickets"] += 1
    ticket = gpu["tickets"]
    now = ctx.now
    duration = op["duration_ns"]
    end = None
    if duration is not None:
        factor = gpu["compute_factor"]
        end = now + (duration if factor == 1.0 else math.ceil(duration * factor))
        end = draw_completion_order(gpu, name, end, ctx)
        ctx.deliver(end, ctx.node, DONE_KIND, [gpu["epoch"], name, ticket])
    stream["running"] = {
        "name": op["name"],
        "ticket": ticket,
        "start_ns": now,
        "end_ns": end,
        "done_kind": op["done_kind"],
        "payload": op["payload"],
    }
    if op["started_kind"] is not None:
        ctx.deliver(now, ctx.node, op["started_kind"], op["payload"])


def draw_completion_order(gpu: dict[str, Any], own: str, end: int, ctx: Context) -> int:
    """For each timed kernel running on another stream, draw whether the two finish in flipped order."""
    for other_name, other in gpu["streams"].items():
        running = other["running"]
        if other_name == own or running is None or running["end_ns"] is None:
            continue
        if ctx.choose(SITE_ORDER, 2) == 0:
            continue
        other_end = running["end_ns"]
        if end < other_end:
            end = other_end + 1
        else:
            gpu["tickets"] += 1
            running["ticket"] = gpu["tickets"]
            running["end_ns"] = end + 1
            ctx.deliver(end + 1, ctx.node, DONE_KIND, [gpu["epoch"], other_name, running["ticket"]])
    return end


def report_unhandled(ctx: Context, running: dict[str, Any], done_kind: str) -> None:
    message = f"kernel {running['name']!r} finished with done_kind {done_kind!r}, which has no handler"
    ctx.fail("unhandled", message, site=f"gpu.{done_kind}")


def _compiled_pump() -> Any:
    """Fabric's compiled twin of :func:`pump_python` (fabric/_speedups_gpu_pump.h), or the Python one.

    The pump and the kernel starts under it were ~30% of a 10,000-rank tree step in Python (dict
    lookups and small lists, per rank and per kernel). The C pump does the same steps on the same
    state dicts and calls back into the Python functions handed to it for everything off the
    common path: a race report, a ``gpu.order`` draw, a compute factor other than 1.0, a context
    that is not the compiled one. ``TIMETRAVEL_PURE_PYTHON=1`` runs :func:`pump_python`;
    tests/test_fabric_gpu_compiled.py compares the two bit for bit.
    """
    compiled = speedups.compiled
    if compiled is None:
        return pump_python
    compiled.configure_gpu(
        pump_python,
        draw_completion_order,
        race._report,
        math.ceil,
        DONE_KIND,
        race.TRACKED_BUFFERS_MAX,
        report_unhandled,
        STREAM_OPS_MAX,
        stream_of,
        event_entry,
    )
    return compiled.gpu_pump


pump = _compiled_pump()
"""Advance every stream until none can move: :func:`pump_python`, in C when fabric's compiled code
is built."""
