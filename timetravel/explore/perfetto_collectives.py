"""The collectives of a torch run as Perfetto slices: one track per rank (explore/perfetto.py's helper).

A torch recording's World has a ``c10d`` node (torch/c10d.py) whose flight recorder lists, per rank,
its last collectives: ``key`` (``<group>#<seq>``, or ``p2p:…`` for a send/recv), the call's ``id``,
``what`` (op, reduce op, shapes), ``state`` and the entry and completion times ``t_enter_ns`` /
``t_done_ns`` — the completion time the fabric model gave the collective, later than the event that
completed it. The exporter re-executes event by event; after each event delivered to ``c10d`` this
module reads those logs (plain data, no torch import here) and

* notes every newly entered collective with its tensors' shapes, dtypes and bytes, read from the
  calling rank's ``outbox`` (where its inputs wait for c10d: still there right after the call);
* turns every newly completed one into a slice on the rank's ``collectives`` thread, from its entry
  to its completion, named ``<op> <group>#<seq>`` (``all_reduce 0#7``); a collective still open when
  the export ends (a hang) runs to the end, with ``unfinished`` in its args;
* marks each optimizer step a rank reports (a ``step`` event) as an instant on that track.

Collectives of one rank can overlap (``async_op=True`` work, a send beside a recv): a slice goes on
the first lane of the rank whose previous slice has ended, so every lane nests properly (Perfetto
draws overlapping slices of one thread wrongly). Lanes are assigned when the export ends, in order
of entry, so the layout does not depend on the order completions were seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

COLLECTIVE_NODE = "c10d"
CALL_KIND = "call"
STEP_KIND = "step"
THREADS_PER_PROCESS = 100
"""As explore/perfetto.py numbers threads: tid = pid * THREADS_PER_PROCESS + lane."""
COLLECTIVES_LANE = 50
"""Lanes 50, 51, ... of a rank: its collectives (more than one where its collectives overlap)."""
SHAPES_LISTED_MAX = 16
"""Tensors of one call whose shape and dtype a slice's args list (the byte count covers them all)."""


@dataclass
class Collective:
    """One rank's part in one collective, as the export saw it."""

    rank: str
    key: str
    call_id: int
    what: str
    t_enter_ns: int
    op: str = ""
    group: str = ""
    seq: Any = None
    shapes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    tensor_count: int = 0
    bytes: int = 0
    t_done_ns: int | None = None


@dataclass
class CollectiveTracks:
    """What the exporter gathers about collectives and steps while it re-executes."""

    open: dict[tuple[str, int], Collective] = field(default_factory=dict)
    """(rank, call id) -> a collective entered and not yet completed."""
    done: list[Collective] = field(default_factory=list)
    steps: list[tuple[str, int, Any]] = field(default_factory=list)
    """(rank node, t_ns, step number) of each optimizer step reported."""

    def observe(self, world: Any, event: Any) -> None:
        """After an event: a ``c10d`` call may have entered or completed collectives; a step is noted."""
        if event.dst != COLLECTIVE_NODE:
            return
        payload = event.payload if isinstance(event.payload, dict) else {}
        if event.kind == STEP_KIND and "rank" in payload:
            self.steps.append((f"r{payload['rank']}", event.t, payload.get("step")))
        if event.kind != CALL_KIND:
            return
        state = world.nodes[COLLECTIVE_NODE]
        for rank, log in state.get("flight", {}).items():
            for item in log:
                self._seen(world, str(rank), item, payload)

    def _seen(self, world: Any, rank: str, item: dict[str, Any], payload: dict[str, Any]) -> None:
        call = (rank, int(item["id"]))
        known = self.open.get(call)
        if known is None:
            if item.get("state") == "completed" and not _entered_now(rank, item, payload):
                return  # completed before the export saw it enter (or reported already)
            known = self.open[call] = _entered(world, rank, item, payload)
        if item.get("state") == "completed" and known.t_done_ns is None:
            known.t_done_ns = int(item["t_done_ns"])
            self.done.append(self.open.pop(call))

    def unfinished(self) -> list[Collective]:
        """The collectives entered and never completed (a hang, or a truncated export)."""
        return list(self.open.values())


def _entered_now(rank: str, item: dict[str, Any], payload: dict[str, Any]) -> bool:
    return str(payload.get("rank")) == rank and payload.get("id") == item["id"]


def _entered(world: Any, rank: str, item: dict[str, Any], payload: dict[str, Any]) -> Collective:
    """A collective seen entering: its op, group, seq and tensors (from the rank's outbox, when this
    event is its call; otherwise from the flight recorder's text only)."""
    collective = Collective(
        rank=f"r{rank}",
        key=str(item["key"]),
        call_id=int(item["id"]),
        what=str(item.get("what", "")),
        t_enter_ns=int(item["t_enter_ns"]),
    )
    collective.op = collective.what.split("(", 1)[0]
    group, _, seq = collective.key.rpartition("#")
    collective.group, collective.seq = group, int(seq) if seq.isdigit() else seq
    if _entered_now(rank, item, payload):
        collective.op = str(payload.get("op", collective.op))
        node = world.nodes.get(f"r{rank}", {})
        inputs = node.get("outbox", {}).get(str(item["id"]), []) if isinstance(node, dict) else []
        arrays = [array for array in inputs if hasattr(array, "shape") and hasattr(array, "dtype")]
        collective.tensor_count = len(arrays)
        collective.bytes = int(sum(int(array.nbytes) for array in arrays))
        collective.shapes = [[int(size) for size in array.shape] for array in arrays[:SHAPES_LISTED_MAX]]
        collective.dtypes = [str(array.dtype) for array in arrays[:SHAPES_LISTED_MAX]]
    return collective


def assign_lanes(collectives: list[Collective]) -> list[tuple[Collective, int]]:
    """Each collective with a lane of its rank: the first whose last slice ended by its entry."""
    lanes: dict[str, list[int]] = {}
    placed = []
    for collective in sorted(collectives, key=lambda item: (item.rank, item.t_enter_ns, item.call_id)):
        ends = lanes.setdefault(collective.rank, [])
        end_ns = collective.t_done_ns if collective.t_done_ns is not None else collective.t_enter_ns
        lane = next((index for index, end in enumerate(ends) if end <= collective.t_enter_ns), len(ends))
        if lane == len(ends):
            ends.append(end_ns)
        else:
            ends[lane] = end_ns
        placed.append((collective, lane))
    return placed


def slice_args(collective: Collective) -> dict[str, Any]:
    args: dict[str, Any] = {
        "op": collective.op,
        "key": collective.key,
        "group": collective.group,
        "seq": collective.seq,
        "call": collective.what,
        "t_enter_ns": collective.t_enter_ns,
        "t_done_ns": collective.t_done_ns,
        "shapes": collective.shapes,
        "dtypes": collective.dtypes,
        "tensors": collective.tensor_count,
        "bytes": collective.bytes,
    }
    return args


def trace_records(
    tracks: CollectiveTracks, pids: dict[str, int], end_ns: int, timestamp: Callable[[int], float]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, int]]:
    """The trace's thread metadata, its slices and instants, and their counts (``collectives``,
    ``optimizer_steps``). ``timestamp``: explore/perfetto.py's ns-exact microseconds."""
    metadata: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    counts = {"collectives": 0, "optimizer_steps": 0}
    named: set[tuple[str, int]] = set()

    def tid_of(node: str, lane: int) -> int:
        tid = pids[node] * THREADS_PER_PROCESS + COLLECTIVES_LANE + lane
        if (node, lane) not in named:  # named, and sorted before the rank's events, when first used
            named.add((node, lane))
            name = "collectives" if lane == 0 else f"collectives ({lane + 1}: overlapping)"
            metadata.append(
                {"ph": "M", "name": "thread_name", "pid": pids[node], "tid": tid, "args": {"name": name}}
            )
            metadata.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pids[node],
                    "tid": tid,
                    "args": {"sort_index": lane - COLLECTIVES_LANE},
                }
            )
        return tid

    for collective, lane in assign_lanes([*tracks.done, *tracks.unfinished()]):
        if collective.rank not in pids:
            continue
        args = slice_args(collective)
        done_ns = collective.t_done_ns
        if done_ns is None:
            args["unfinished"] = "entered and not completed when the recording ends"
            done_ns = max(end_ns, collective.t_enter_ns)
        events.append(
            {
                "ph": "X",
                "name": f"{collective.op} {collective.key}",
                "cat": "collective",
                "ts": timestamp(collective.t_enter_ns),
                "dur": timestamp(done_ns - collective.t_enter_ns),
                "pid": pids[collective.rank],
                "tid": tid_of(collective.rank, lane),
                "args": args,
            }
        )
        counts["collectives"] += 1
    for node, t_ns, step in tracks.steps:
        if node not in pids:
            continue
        counts["optimizer_steps"] += 1
        events.append(
            {
                "ph": "i",
                "s": "t",
                "name": f"optimizer step {step}",
                "cat": "step",
                "ts": timestamp(t_ns),
                "pid": pids[node],
                "tid": tid_of(node, 0),
                "args": {"t_ns": t_ns, "step": step},
            }
        )
    return metadata, events, counts
