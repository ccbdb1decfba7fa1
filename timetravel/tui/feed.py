"""Turn what the kernel produces (a World, its metrics, its processed events) into widget data.

This is the only module of the TUI that knows the shape of a World, and it reads only what the
scenario declares in its ``view`` (:class:`~timetravel.sim.scenario.ScenarioView`): a rank is a node
of the declared role; its step, collective count, last progress, status and whom it waits on are
the declared state keys (its collective count may come from a declared ``collectives`` node instead,
the torch scenario's ``c10d``: ``last/<rank>/seq``); it is crashed when the world has it ``down``,
``nan`` when a float in its state is not finite, ``diverged`` when its declared weights differ from
the majority's, and ``partitioned`` or ``slow`` while a fault of a kind the scenario declares so
targets it. Whom a rank waits on also comes from a hang failure's flight recorder (dp_training's or
torch's), at the hang.

Nothing here imports textual, so the adapters are tested (and reused by other front ends) alone.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from timetravel.sim.encoding import array_digest
from timetravel.sim.event import Event
from timetravel.sim.kernel import Simulation
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import Scenario, ScenarioView
from timetravel.sim.world import World
from timetravel.tui.model import (
    RANK_STATES,
    EventRow,
    RankCell,
    TimelineData,
    TimeMark,
)

FLIGHT_RECORDER_KEY = "flight_recorder"
"""A hang failure's table of ranks (dp_training's): rows of ``rank`` and ``waits_on``."""
EVENTS_KEPT_MAX = 5_000_000
"""Bound on the events an in-memory run keeps for the event log (a recording streams instead)."""
PAYLOAD_TEXT_MAX = 60


# -- the timeline ---------------------------------------------------------------------------------


def fault_start_ns(fault: Mapping[str, Any]) -> int | None:
    """When a fault record starts (``t_start`` in the fabric's schedule, ``t_ns`` otherwise)."""
    for key in ("t_start", "t_start_ns", "t_ns", "t"):
        value = fault.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def fault_label(fault: Mapping[str, Any]) -> str:
    """``f3 bitflip rank5``: the id, the kind and the target of a fault record."""
    target = fault.get("target", fault.get("node", ""))
    if isinstance(target, list):
        target = ",".join(str(item) for item in target[:3]) + ("…" if len(target) > 3 else "")
    words = [str(fault.get("id", "")), str(fault.get("kind", "fault")), str(target or "")]
    return " ".join(word for word in words if word)


def metric_points(world: World, name: str) -> tuple[tuple[int, float], ...]:
    """A metric's ``(t_ns, value)`` points (every node's), for a curve along the timeline."""
    points = []
    for entry in world.metrics.get(name, ()):
        t_ns, _node, value = entry
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            points.append((int(t_ns), float(value)))
    return tuple(points)


def timeline_from_world(
    world: World,
    view: ScenarioView,
    *,
    t_end_ns: int | None = None,
    snapshots_ns: Iterable[int] = (),
    branch_marks: Iterable[tuple[int, str]] = (),
    likelihood: Sequence[tuple[int, float]] = (),
) -> TimelineData:
    """The timeline of a run whose final (or current) world is ``world``."""
    marks = [TimeMark(t, "snapshot") for t in snapshots_ns]
    for fault in world.faults:
        start = fault_start_ns(fault)
        if start is not None:
            marks.append(TimeMark(start, "fault", fault_label(fault)))
    marks += [TimeMark(t, "branch", name) for t, name in branch_marks]
    for failure in world.failures:
        where = f" on {failure['node']}" if failure.get("node") else ""
        marks.append(TimeMark(failure["t_ns"], "failure", f"{failure['kind']}{where}"))
    marks.sort(key=lambda mark: mark.t_ns)
    end = world.t_ns if t_end_ns is None else t_end_ns
    return TimelineData(
        t_start_ns=0,
        t_end_ns=max(end, 1),
        unit=world.display_unit,
        marks=tuple(marks),
        loss=metric_points(world, view.loss_metric),
        likelihood=tuple(likelihood),
    )


# -- the rank grid --------------------------------------------------------------------------------


def rank_names(world: World, view: ScenarioView) -> list[str]:
    """The nodes the rank grid shows: those of the declared role, else of the role most nodes have
    (every node when no role is shared)."""
    roles = world.roles
    if view.rank_role:
        return [name for name in world.nodes if roles.get(name) == view.rank_role]
    counts = Counter(roles.get(name, "") for name in world.nodes)
    if not counts:
        return []
    role, count = counts.most_common(1)[0]
    if count == 1:
        return list(world.nodes)
    return [name for name in world.nodes if roles.get(name) == role]


def _int_at(state: Mapping[str, Any], key: str) -> int:
    """The integer under a declared key (0 when none is declared or the state holds none)."""
    value = state.get(key) if key else None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return 0


def has_nonfinite(value: Any, depth: int = 2) -> bool:
    """True when a float in ``value`` (arrays, scalars, lists and dicts to ``depth``) is NaN or inf."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "fc" and not bool(np.isfinite(value).all())
    if isinstance(value, float):
        return not math.isfinite(value)
    if depth <= 0:
        return False
    if isinstance(value, dict):
        return any(has_nonfinite(item, depth - 1) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_nonfinite(item, depth - 1) for item in value[:1024])
    return False


def _weights_digest(state: Mapping[str, Any], key: str) -> str | None:
    value = state.get(key) if key else None
    return array_digest(value).hex() if isinstance(value, np.ndarray) else None


def _fault_targets(fault: Mapping[str, Any]) -> list[str]:
    target = fault.get("target", fault.get("node"))
    if isinstance(target, str):
        return [target]
    if isinstance(target, list):
        return [item for item in target if isinstance(item, str)]
    if isinstance(target, dict):
        return [item for value in target.values() for item in _fault_targets({"target": value})]
    return []


def _fault_states(world: World, now_ns: int, view: ScenarioView) -> dict[str, set[str]]:
    """Node -> the conditions active faults put it in (the kinds the scenario declares as shown)."""
    active: dict[str, set[str]] = {}
    for fault in world.faults:
        start = fault_start_ns(fault)
        end = fault.get("t_end", fault.get("t_end_ns"))
        state = view.fault_states.get(str(fault.get("kind", "")))
        if state is None or start is None or start > now_ns or (isinstance(end, int) and end <= now_ns):
            continue
        for target in _fault_targets(fault):
            active.setdefault(target, set()).add(state)
    return active


def flight_recorder_waits(failures: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``rank -> "r2,r3"``: whom each rank waited on when a hang was reported, from the
    failure's flight recorder; empty when there is none. dp_training's rows name the peers
    (``waits_on``); the torch scenario's rows give each rank's ``last_entered`` collective key
    instead, so a waiting rank waits on the ranks that have not entered its collective — the
    rank that skipped it, or whose contribution never arrived."""
    waits: dict[str, str] = {}
    for failure in failures:
        rows = failure.get(FLIGHT_RECORDER_KEY)
        if not isinstance(rows, list):
            continue
        rows = [row for row in rows if isinstance(row, dict) and isinstance(row.get("rank"), str)]
        entered = {row["rank"]: _collective_key(row.get("last_entered")) for row in rows}
        for row in rows:
            if isinstance(row.get("waits_on"), list):
                waits[row["rank"]] = ",".join(str(peer) for peer in row["waits_on"])
                continue
            mine = entered[row["rank"]]
            if row.get("status") != "waiting" or mine is None:
                continue
            behind = [
                rank
                for rank, key in entered.items()
                if key is not None and key[0] == mine[0] and key[1] < mine[1]
            ]
            waits[row["rank"]] = ",".join(behind)
    return waits


def _collective_key(key: Any) -> tuple[str, int] | None:
    """``"0#9"`` (group 0, sequence number 9) as ``("0", 9)``; None for anything else (p2p keys)."""
    if not isinstance(key, str) or "#" not in key:
        return None
    group, _, seq = key.rpartition("#")
    return (group, int(seq)) if seq.isdigit() else None


def collective_seqs_from_recorder(world: World, view: ScenarioView) -> dict[str, int]:
    """``"r1" -> 8``: each rank's last collective sequence number where a scenario keeps it in a node
    of its declared ``collectives_role`` (``last/<rank index>/seq``: the torch scenario, whose rank
    nodes keep none); empty for other worlds."""
    found: dict[str, int] = {}
    if not view.collectives_role:
        return found
    for name, role in world.roles.items():
        last = world.nodes[name].get("last") if role == view.collectives_role else None
        if not isinstance(last, dict):
            continue
        for index, entry in last.items():
            if isinstance(entry, dict) and isinstance(entry.get("seq"), int):
                found[f"r{index}"] = entry["seq"]
    return found


def rank_cells_from_world(
    world: World, view: ScenarioView, names: Sequence[str] | None = None
) -> list[RankCell]:
    """Each rank's condition and counters in ``world`` (see the module docstring for the rules)."""
    names = rank_names(world, view) if names is None else list(names)
    digests = {name: _weights_digest(world.nodes[name], view.weight_key) for name in names}
    known = [digest for digest in digests.values() if digest is not None]
    majority = Counter(known).most_common(1)[0][0] if known else None
    active = _fault_states(world, world.t_ns, view)
    failed = {(failure.get("node"), failure["kind"]) for failure in world.failures}
    waits = flight_recorder_waits(world.failures)
    sequence_numbers = collective_seqs_from_recorder(world, view)
    cells = []
    for name in names:
        state = world.nodes[name]
        candidates = ["healthy", *sorted(active.get(name, ()))]
        status = state.get(view.status_key) if view.status_key else None
        if status in RANK_STATES:
            candidates.append(status)
        if (name, "hang") in failed:  # the rank a hang names: the others wait for it
            candidates.append("hung")
        if (digests[name] is not None and digests[name] != majority) or (name, "divergence") in failed:
            candidates.append("diverged")
        if name in world.down:
            candidates.append("crashed")
        if (name, "nan") in failed or has_nonfinite(state):
            candidates.append("nan")
        waiting = state.get(view.waiting_key) if view.waiting_key else None
        if not isinstance(waiting, str) or not waiting:
            waiting = waits.get(name, "")
        cells.append(
            RankCell(
                name=name,
                state=max(candidates, key=RANK_STATES.index),
                step=_int_at(state, view.step_key),
                collective_seq=sequence_numbers.get(name, _int_at(state, view.collective_seq_key)),
                last_progress_ns=_int_at(state, view.progress_key),
                waiting_on=waiting if isinstance(waiting, str) else "",
            )
        )
    return cells


# -- the event log --------------------------------------------------------------------------------


def payload_text(payload: Any, width: int = PAYLOAD_TEXT_MAX) -> str:
    """A short one-line summary of an event payload (arrays by dtype and shape)."""
    if isinstance(payload, np.ndarray):
        text = f"{payload.dtype.name}{list(payload.shape)}"
    elif payload is None:
        text = ""
    else:
        text = repr(payload)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


class EventTable:
    """An in-memory event source: numpy columns, so filtering a million rows takes milliseconds.

    Node and kind names are interned to small integer codes; a filter is a boolean mask over
    the codes, kept as the array of matching row indices. Rows are built only when asked for.
    """

    def __init__(
        self,
        events: Sequence[Event],
        first_number: int = 0,
        fields: Iterable[tuple[int, str, str]] | None = None,
    ) -> None:
        """``fields``: each event's ``(t_ns, dst, kind)`` in order, when the caller can give them
        more cheaply than ``events`` can (a recording decodes a batch without keeping it)."""
        if len(events) > EVENTS_KEPT_MAX:
            raise ValueError(f"an in-memory event table holds at most {EVENTS_KEPT_MAX} events")
        self._events = events
        node_codes: dict[str, int] = {}
        kind_codes: dict[str, int] = {}
        times = array("q")
        nodes = array("i")
        kinds = array("i")
        if fields is None:
            fields = ((event[0], event[2], event[3]) for event in events)
        for t_ns, dst, kind in fields:
            times.append(t_ns)
            nodes.append(node_codes.setdefault(dst, len(node_codes)))
            kinds.append(kind_codes.setdefault(kind, len(kind_codes)))
        if len(times) != len(events):
            raise ValueError(f"the event sequence yielded {len(times)} events, its length says {len(events)}")
        self._times = np.frombuffer(times, dtype=np.int64) if times else np.zeros(0, np.int64)
        self._nodes = np.frombuffer(nodes, dtype=np.int32) if nodes else np.zeros(0, np.int32)
        self._kinds = np.frombuffer(kinds, dtype=np.int32) if kinds else np.zeros(0, np.int32)
        self._node_codes = node_codes
        self._kind_codes = kind_codes
        self._first_number = first_number
        self._selection: np.ndarray | None = None
        self._selected_times = self._times
        self._known: dict[int, EventRow] = {}
        """Rows given ready-made (``remember``), by number; shared with the filtered views."""

    def remember(self, rows: Iterable[EventRow]) -> None:
        """Serve these rows without reading their events (they were read elsewhere already)."""
        self._known.clear()
        self._known.update((row.number, row) for row in rows)

    @property
    def first_number(self) -> int:
        """The number of the table's first event (0 for an in-memory run, 1 for #1 of a recording)."""
        return self._first_number

    @property
    def last_number(self) -> int:
        """The number of the table's last event (``first_number - 1`` when it is empty)."""
        return self._first_number + len(self._times) - 1

    def _view(self, selection: np.ndarray) -> EventTable:
        view = object.__new__(EventTable)
        view.__dict__.update(self.__dict__)
        view._selection = selection
        view._selected_times = self._times[selection]
        return view

    def __len__(self) -> int:
        return len(self._selected_times)

    def _base_index(self, index: int) -> int:
        return int(self._selection[index]) if self._selection is not None else index

    def row(self, index: int) -> EventRow:
        if not 0 <= index < len(self):
            raise IndexError(f"event row {index} out of range (0..{len(self) - 1})")
        base = self._base_index(index)
        known = self._known.get(self._first_number + base)
        if known is not None:
            return known
        t_ns, _seq, dst, kind, payload = self._events[base]
        return EventRow(self._first_number + base, t_ns, dst, kind, payload_text(payload))

    def index_at_time(self, t_ns: int) -> int:
        return int(np.searchsorted(self._selected_times, t_ns, side="right")) - 1

    def index_of_number(self, number: int) -> int:
        base = number - self._first_number
        if self._selection is None:
            index = max(base, 0)
        else:
            index = int(np.searchsorted(self._selection, base, side="left"))
        return index if index < len(self) else -1

    def filtered(self, node: str | None = None, kind: str | None = None) -> EventTable:
        mask = np.ones(len(self._times), dtype=np.bool_)
        if node:
            mask &= self._nodes == self._node_codes.get(node, -1)
        if kind:
            mask &= self._kinds == self._kind_codes.get(kind, -1)
        return self._view(np.flatnonzero(mask))

    def node_names(self) -> list[str]:
        return list(self._node_codes)

    def kind_names(self) -> list[str]:
        return list(self._kind_codes)


def index_at_time(times: Sequence[int], t_ns: int) -> int:
    """Index of the last time <= ``t_ns`` in a sorted sequence, or -1."""
    return bisect.bisect_right(times, t_ns) - 1


# -- a run kept in memory -------------------------------------------------------------------------


def run_with_events(
    scenario: Scenario,
    config: dict[str, Any],
    seed: int,
    *,
    until_ns: int | None = None,
    max_events: int = EVENTS_KEPT_MAX,
) -> tuple[World, list[Event]]:
    """Run a seed and keep every processed event (for the event log of a run without a recording)."""
    world = build_world(scenario, config, seed)
    events: list[Event] = []

    def keep(_first: int, batch: list[Event], _digest: bytes) -> None:
        events.extend(batch)

    simulation = Simulation(scenario, world, on_chain_batch=keep)
    simulation.run(until_ns=until_ns, max_events=max_events)
    events.extend(world.chain_batch)
    return world, events
