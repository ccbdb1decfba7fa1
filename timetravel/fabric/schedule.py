"""Fault records: their schema, validation of user schedules, and scheduling their events.

A fault is one plain-data record in ``world.faults``::

    {"id": "f1", "kind": "partition", "target": "r3", "t_start": 950000000, "t_end": 960000000,
     "params": {...every parameter of the kind, defaults filled in...}}

Times are integer nanoseconds (``t_end`` is None for a fault that never ends), the same record
shape every scenario's schedule has, so the minimizer can drop records (ddmin), bisect a window
(``t_end - t_start``) and bisect int parameters towards 0. Every int parameter is therefore
"milder" when smaller: ``count`` (how many messages a fault may hit) is null for no limit, and
0 hits none. Ids are ``f1``, ``f2``, ... and are never renumbered or reused: a minimizer that
removes ``f2`` leaves ``f1`` and ``f3`` as they were, so a failure report, a branch and a repro
keep naming the same fault. Applying a fault is an event of its own, kind ``fault``, delivered to
the fault's target node at ``t_start`` (payload ``[id, "start"]``) and, when the fault has an end,
at ``t_end`` (``[id, "end"]``). The handler looks the record up by id when the event fires, so
removing the record from ``world.faults`` before then removes the fault.

A user writes a schedule as JSON (``--set faults=@file.json`` or inline): a list of records whose
``t_start``/``t_end`` are integer nanoseconds or time text (``"950ms"``, ``"120us"``; text without
a unit is in ms, as everywhere a person types a time), and only the parameters that differ from
the defaults. ``t_start_ns``/``t_end_ns`` are accepted as spellings of the same integer fields.
Anything wrong is a one-line :class:`ConfigError` naming the fault and the field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from timetravel.fabric.fault_kinds import FAULT_KINDS, PARAM_SPECS
from timetravel.fabric.topology import Topology
from timetravel.sim.scenario import ConfigError
from timetravel.sim.timefmt import DISPLAY_UNIT_DEFAULT, TimeFormatError, parse_time

FAULT_KIND = "fault"
"""Event kind of fault start and end events (the one kind a crashed node still receives)."""
SCHEDULE_LENGTH_MAX = 10_000
RECORD_KEYS = (
    "id",
    "kind",
    "target",
    "t_start",
    "t_start_ns",
    "t_end",
    "t_end_ns",
    "params",
    "note",
    "expected",
    "hits",
)
"""Fields a record may have; ``note`` is for people, ``expected`` and ``hits`` (from reports) are ignored."""
_ID_PATTERN = re.compile(r"^f([1-9][0-9]{0,8})$")
_LINK_PATTERN = re.compile(
    r"^(?:(?P<rank_class>nvlink_out|nvlink_in|nic_out|nic_in)\[r(?P<rank>\d+)\]"
    r"|leaf_up\[l(?P<up_leaf>\d+)->s(?P<up_spine>\d+)\]"
    r"|spine_down\[s(?P<down_spine>\d+)->l(?P<down_leaf>\d+)\])$"
)


class ScheduleContext:
    """What validating a record needs to know about the world: its nodes, ranks, topology, buffers."""

    def __init__(
        self, nodes: Iterable[str], ranks: list[str], topology: Topology, buffers: Iterable[str] = ()
    ) -> None:
        self.nodes = set(nodes)
        self.ranks = ranks
        self.rank_of = {name: index for index, name in enumerate(ranks)}
        self.topology = topology
        self.buffers = tuple(buffers)


def parse_schedule(spec: Any, context: ScheduleContext) -> list[dict[str, Any]]:
    """A user's schedule (a list of records, or an object with a ``faults`` list, as ``timetravel faults --json`` prints) as normalized records."""
    if isinstance(spec, dict) and "faults" in spec:
        spec = spec["faults"]
    if not isinstance(spec, list):
        raise ConfigError(
            "config key 'faults': expected none, swarm, a JSON list of fault records or @file.json, "
            f"got {_short(spec)}"
        )
    if len(spec) > SCHEDULE_LENGTH_MAX:
        raise ConfigError(f"config key 'faults': more than {SCHEDULE_LENGTH_MAX} fault records")
    taken = _given_ids(spec)
    records = []
    next_number = 1
    for item in spec:
        if isinstance(item, dict) and "id" in item:
            fault_id = item["id"]
        else:
            while f"f{next_number}" in taken:
                next_number += 1
            fault_id = f"f{next_number}"
            taken.add(fault_id)
        records.append(normalize_record(item, fault_id, context))
    return records


def _given_ids(spec: list[Any]) -> set[str]:
    taken: set[str] = set()
    for position, item in enumerate(spec, start=1):
        if not isinstance(item, dict) or "id" not in item:
            continue
        fault_id = item["id"]
        if not isinstance(fault_id, str) or not _ID_PATTERN.match(fault_id):
            raise ConfigError(
                f"config key 'faults': fault #{position}: id must look like f1, f2, ... got {fault_id!r}"
            )
        if fault_id in taken:
            raise ConfigError(f"config key 'faults': fault id {fault_id} appears twice")
        taken.add(fault_id)
    return taken


def normalize_record(item: Any, fault_id: str, context: ScheduleContext) -> dict[str, Any]:
    """Check one record and return it with every field present and every parameter filled in."""
    label = f"config key 'faults': fault {fault_id}"
    if not isinstance(item, dict):
        raise ConfigError(f"{label}: a fault record is a JSON object, got {_short(item)}")
    unknown = [key for key in item if key not in RECORD_KEYS]
    if unknown:
        raise ConfigError(f"{label}: unknown field {unknown[0]!r} (fields: {', '.join(RECORD_KEYS)})")
    kind = item.get("kind")
    if kind not in FAULT_KINDS:
        raise ConfigError(f"{label}: kind must be one of {', '.join(FAULT_KINDS)}, got {_short(kind)}")
    target = item.get("target")
    if not isinstance(target, str) or target not in context.nodes:
        raise ConfigError(f"{label}: target must be a node name, got {_short(target)}")
    t_start = _time_field(item, "t_start", label, required=True)
    t_end = _time_field(item, "t_end", label, required=False)
    assert t_start is not None  # required above
    if t_end is not None and t_end < t_start:
        raise ConfigError(f"{label}: t_end ({t_end} ns) is before t_start ({t_start} ns)")
    params = item.get("params", {})
    if not isinstance(params, dict):
        raise ConfigError(f"{label}: params must be a JSON object, got {_short(params)}")
    record = {
        "id": fault_id,
        "kind": kind,
        "target": target,
        "t_start": t_start,
        "t_end": t_end,
        "params": _normalize_params(kind, params, label, context),
    }
    _check_semantics(record, label, context)
    return record


def _time_field(item: Mapping[str, Any], name: str, label: str, required: bool) -> int | None:
    """``t_start``/``t_end``: int ns or time text; ``<name>_ns`` is another spelling of the int."""
    if name in item and f"{name}_ns" in item:
        raise ConfigError(f"{label}: give {name} or {name}_ns, not both")
    key = f"{name}_ns" if f"{name}_ns" in item else name
    if key not in item or (item[key] is None and not required):
        if required:
            raise ConfigError(f"{label}: {name} is required")
        return None
    value = item[key]
    parsed = _non_negative_time(value, f"{label}: {name}", DISPLAY_UNIT_DEFAULT, text=key == name)
    if parsed is not None:
        return parsed
    raise ConfigError(
        f"{label}: {key} must be non-negative int ns or time text like 950ms, got {_short(value)}"
    )


def _normalize_params(
    kind: str, params: Mapping[str, Any], label: str, context: ScheduleContext
) -> dict[str, Any]:
    spec = PARAM_SPECS[kind]
    unknown = [name for name in params if name not in spec]
    if unknown:
        known = ", ".join(spec) or "none"
        raise ConfigError(f"{label}: {kind} has no parameter {unknown[0]!r} (parameters: {known})")
    normalized = {}
    for name, (checker, default) in spec.items():
        value = params.get(name, default)
        normalized[name] = _check_value(checker, value, f"{label}: params.{name}", context)
    return normalized


def _check_value(checker: str, value: Any, label: str, context: ScheduleContext) -> Any:
    """One parameter value, checked and normalized by the checker its kind names (fault_kinds.py)."""
    if value is None and checker.endswith("_or_none"):
        return None
    if checker in ("direction_out", "direction_both"):
        return _one_of(value, ("out", "in", "both"), label)
    if checker == "scope":
        return _one_of(value, ("node", "host"), label)
    if checker == "mode":
        return _one_of(value, ("drop", "hold"), label)
    if checker == "node_or_none":
        if not isinstance(value, str) or value not in context.nodes:
            raise ConfigError(f"{label}: expected a node name, got {_short(value)}")
        return value
    if checker == "nodes_or_none":
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{label}: expected a non-empty list of node names, got {_short(value)}")
        for name in value:
            _check_value("node_or_none", name, label, context)
        return list(value)
    if checker in ("strings_or_none", "string_or_none"):
        items = value if checker == "strings_or_none" else [value]
        if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
            raise ConfigError(
                f"{label}: expected {'a list of ' if checker == 'strings_or_none' else 'a '}non-empty string, got {_short(value)}"
            )
        return value
    if checker in ("count", "count_or_none"):
        if type(value) is not int or value < 0:
            raise ConfigError(f"{label}: expected a non-negative int, got {_short(value)}")
        return value
    if checker == "probability":
        if type(value) not in (int, float) or not 0.0 <= value <= 1.0:
            raise ConfigError(f"{label}: expected a probability in [0, 1], got {_short(value)}")
        return float(value)
    if checker in ("fraction", "factor"):
        return _factor(checker, value, label)
    if checker == "time":
        return _time_value(value, label)
    if checker == "links_or_none":
        return _links(value, label, context.topology)
    if checker == "spines_or_none":
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{label}: expected a non-empty list of spine numbers, got {_short(value)}")
        for spine in value:
            if type(spine) is not int or not 0 <= spine < context.topology.spines:
                raise ConfigError(
                    f"{label}: spine {_short(spine)} out of range [0, {context.topology.spines})"
                )
        return list(value)
    raise AssertionError(f"unknown checker {checker}")


def _one_of(value: Any, choices: tuple[str, ...], label: str) -> str:
    if value not in choices:
        raise ConfigError(f"{label}: expected one of {', '.join(choices)}, got {_short(value)}")
    return str(value)


def _factor(checker: str, value: Any, label: str) -> float:
    if type(value) not in (int, float):
        raise ConfigError(f"{label}: expected a number, got {_short(value)}")
    if checker == "fraction" and not 0.0 < value <= 1.0:
        raise ConfigError(f"{label}: a bandwidth factor is in (0, 1], got {value}")
    if checker == "factor" and not 1.0 <= value <= 1_000_000.0:
        raise ConfigError(f"{label}: a compute factor is in [1, 1e6], got {value}")
    return float(value)


def _time_value(value: Any, label: str) -> int:
    parsed = _non_negative_time(value, label, "ns", text=True)
    if parsed is not None:
        return parsed
    raise ConfigError(
        f"{label}: expected a non-negative time (int ns or text like 50us), got {_short(value)}"
    )


def _non_negative_time(value: Any, label: str, unit: str, *, text: bool) -> int | None:
    """``value`` as non-negative int ns, or (where ``text``) time text with bare numbers in
    ``unit``; None when it is neither (the caller says what it expected). Unreadable text is a
    ConfigError naming ``label``."""
    if type(value) is int and value >= 0:
        return value
    if text and isinstance(value, str):
        try:
            parsed = parse_time(value, unit)
        except TimeFormatError as error:
            raise ConfigError(f"{label}: {error}") from None
        if parsed >= 0:
            return parsed
    return None


def _links(value: Any, label: str, topology: Topology) -> list[int]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{label}: expected a non-empty list of link ids or names, got {_short(value)}")
    links = []
    for item in value:
        link = item if type(item) is int else parse_link(item, topology)
        if link is None or not 0 <= link < topology.link_count:
            raise ConfigError(
                f"{label}: {_short(item)} is not a link of this fabric (e.g. nic_out[r3], leaf_up[l0->s1])"
            )
        links.append(link)
    return links


def parse_link(text: Any, topology: Topology) -> int | None:
    """A link name as :meth:`Topology.describe_link` writes it, as a link id (None when it is not one)."""
    if not isinstance(text, str):
        return None
    match = _LINK_PATTERN.match(text.strip())
    if match is None:
        return None
    groups = match.groupdict()
    if groups["rank_class"] is not None:
        rank = int(groups["rank"])
        if rank >= topology.ranks:
            return None
        return topology.rank_links(rank)[
            ("nvlink_out", "nvlink_in", "nic_out", "nic_in").index(groups["rank_class"])
        ]
    if groups["up_leaf"] is not None:
        leaf, spine, base = int(groups["up_leaf"]), int(groups["up_spine"]), topology.leaf_up_base
    else:
        leaf, spine, base = int(groups["down_leaf"]), int(groups["down_spine"]), topology.spine_down_base
    if leaf >= topology.leaves or spine >= topology.spines:
        return None
    return base + leaf * topology.spines + spine


def _check_semantics(record: dict[str, Any], label: str, context: ScheduleContext) -> None:
    params = record["params"]
    kind = record["kind"]
    if kind == "partition":
        if params["scope"] == "host" and record["target"] not in context.rank_of:
            raise ConfigError(f"{label}: scope host needs a rank as target, {record['target']!r} is not one")
        cuts_links = params["links"] is not None or params["spines"] is not None
        if cuts_links and (params["nodes"] is not None or params["peers"] is not None):
            raise ConfigError(f"{label}: a partition cuts either links/spines or nodes/peers, not both")
    buffer = params.get("buffer") if kind == "corrupt" else None
    if buffer is not None and context.buffers and buffer not in context.buffers:
        raise ConfigError(
            f"{label}: unknown buffer {buffer!r} (this scenario's buffers: {', '.join(context.buffers)})"
        )


def schedule_fault_events(world: Any, record: Mapping[str, Any]) -> None:
    """Queue a record's start event (and end event, if it has an end) at its target node."""
    world.schedule(record["t_start"], record["target"], FAULT_KIND, [record["id"], "start"])
    if record["t_end"] is not None:
        world.schedule(record["t_end"], record["target"], FAULT_KIND, [record["id"], "end"])


def fault_site(fault_id: str, what: str) -> str:
    """The choice site of one fault's own draws: ``fault.f7.drop`` (its coins), ``fault.f7.corrupt.bit``.

    Keyed by the fault's id — never by the kind alone — so that each fault draws from a stream of
    its own: removing or adding another fault (as a minimizer does) never shifts the index of this
    fault's draws, and so never changes which messages it hits or which bit it flips. Ids are never
    renumbered (``f2`` always means one fault), so the stream stays the fault's across schedules.
    """
    return f"fault.{fault_id}.{what}"


def fault_number(fault_id: str) -> int:
    """The number in a fault id (``f12`` -> 12); 0 for anything else."""
    match = _ID_PATTERN.match(str(fault_id))
    return int(match.group(1)) if match else 0


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
