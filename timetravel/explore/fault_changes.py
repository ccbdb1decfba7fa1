"""Fault changes a branch makes to a live world: drop, add or edit a record of the fault schedule.

**The fault spec** is what a person types after ``--add-fault`` (and, after ``ID:``, after
``--edit-fault``): comma-separated ``key=value`` pairs::

    kind=drop,target=r3,t_start=950ms,t_end=990ms,probability=0.5,kinds=grad|need
    kind=corrupt,target=r2,t_start=120us,buffer=weights,bit=30
    f3:t_end=990ms                          (--edit-fault: fault f3 now ends at 990 ms)
    f5:probability=0.25,count=2             (--edit-fault: two of its parameters)

``id``, ``kind``, ``target``, ``t_start``, ``t_end`` and ``note`` are fields of the record; every
other key is a parameter of the kind (docs/fabric.md lists them). Values are read as: ``null``
(or ``none``) for nothing, ``true``/``false``, integers, decimals, a number with a time unit
(``50us``, ``990ms``: integer nanoseconds), ``a|b|c`` for a list, and anything else as text. A
bare number for ``t_start``/``t_end`` is in the recording's display unit (ms), as every time a
person types. A spec that starts with ``{`` is a JSON record instead, as ``timetravel faults
--json`` prints them. A new fault without an ``id`` gets the next id never issued (``f17``).

**Which scenarios.** Adding and editing go through the fabric's own validation (``add_fault`` and
``edit_fault`` in :mod:`timetravel.fabric`), so they need a scenario whose faults are the
fabric's records. Dropping works for any scenario whose ``world.faults`` holds records with an
``id``: for the fabric, :func:`timetravel.fabric.remove_fault` ends its effect now and its
pending events become no-ops; for other scenarios the record and its pending ``fault`` events
are removed (what an event already did to a node stays done in both cases).
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Mapping
from typing import Any

from timetravel import fabric
from timetravel.explore.work import ExploreError
from timetravel.fabric.fault_kinds import PARAM_SPECS
from timetravel.fabric.schedule import FAULT_KIND
from timetravel.sim.scenario import ConfigError
from timetravel.sim.timefmt import DISPLAY_UNIT_DEFAULT, TimeFormatError, parse_time
from timetravel.sim.world import World

SPEC_CHARS_MAX = 10_000
SPEC_PAIRS_MAX = 64
LIST_ITEMS_MAX = 4_096
RECORD_FIELDS = ("id", "kind", "target", "t_start", "t_end", "note")
TIME_FIELDS = ("t_start", "t_end")
LIST_CHECKERS = ("strings_or_none", "nodes_or_none", "links_or_none", "spines_or_none")
"""Fabric parameters that take a list: a single value is read as a list of one."""
_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")
_TIME = re.compile(r"^\d+(?:\.\d+)?(?:ns|us|ms|s)$")
_FAULT_ID = re.compile(r"^f[1-9][0-9]{0,8}$")


class FaultSpecError(ExploreError):
    """A fault spec or a fault change that cannot apply; the one-line message says why."""


# -- reading specs --------------------------------------------------------------------------------


def parse_fault_spec(text: str, display_unit: str = DISPLAY_UNIT_DEFAULT) -> dict[str, Any]:
    """A new fault's record (fields and a ``params`` dict) from ``kind=...,target=...`` or JSON."""
    stripped = text.strip()
    if len(stripped) > SPEC_CHARS_MAX:
        raise FaultSpecError(f"a fault spec is at most {SPEC_CHARS_MAX} characters")
    if stripped.startswith("{"):
        try:
            record = json.loads(stripped)
        except json.JSONDecodeError as error:
            raise FaultSpecError(f"fault spec: invalid JSON: {error.msg} at position {error.pos}") from None
        if not isinstance(record, dict):
            raise FaultSpecError("fault spec: a JSON fault is an object")
        return _times_in_unit(dict(record), display_unit)
    record = _pairs_to_record(stripped, display_unit)
    if "kind" not in record or "target" not in record or "t_start" not in record:
        raise FaultSpecError(
            f"fault spec {stripped!r}: give at least kind=, target= and t_start= (e.g. kind=drop,target=r3,t_start=950ms)"
        )
    return record


def parse_fault_edit(text: str, display_unit: str = DISPLAY_UNIT_DEFAULT) -> tuple[str, dict[str, Any]]:
    """``f3:t_end=990ms,probability=0.5`` as the fault id and its changes (fields and ``params``)."""
    fault_id, separator, rest = text.strip().partition(":")
    if not separator or not _FAULT_ID.match(fault_id.strip()):
        raise FaultSpecError(f"fault edit {text!r}: write ID:KEY=VALUE,... (e.g. f3:t_end=990ms)")
    changes = _pairs_to_record(rest, display_unit)
    if not changes.get("params") and len(changes) == 1:
        raise FaultSpecError(f"fault edit {text!r}: nothing to change after {fault_id}:")
    return fault_id.strip(), changes


def _pairs_to_record(text: str, display_unit: str) -> dict[str, Any]:
    record: dict[str, Any] = {"params": {}}
    pairs = [pair for pair in text.split(",") if pair.strip()]
    if len(pairs) > SPEC_PAIRS_MAX:
        raise FaultSpecError(f"a fault spec has at most {SPEC_PAIRS_MAX} key=value pairs")
    for pair in pairs:
        key, equals, value = pair.partition("=")
        key = key.strip()
        if not equals or not key:
            raise FaultSpecError(f"fault spec: {pair.strip()!r} is not key=value")
        target = record if key in RECORD_FIELDS else record["params"]
        if key in target:
            raise FaultSpecError(f"fault spec: {key} given twice")
        target[key] = _time_field(key, value.strip(), display_unit) if key in TIME_FIELDS else _value(value)
    return record


def _value(text: str) -> Any:
    """One value of a spec: null, a bool, an int, a float, a time with its unit, a list, or text."""
    text = text.strip()
    if "|" in text:
        items = [item for item in text.split("|") if item.strip()]
        if len(items) > LIST_ITEMS_MAX:
            raise FaultSpecError(f"fault spec: a list has at most {LIST_ITEMS_MAX} items")
        return [_value(item) for item in items]
    lowered = text.lower()
    if lowered in ("null", "none"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if _TIME.match(text):
        return parse_time(text)
    return text


def _time_field(key: str, text: str, display_unit: str) -> int | None:
    if text.lower() in ("null", "none"):
        if key == "t_start":
            raise FaultSpecError("fault spec: t_start cannot be null")
        return None
    try:
        value = parse_time(text, display_unit)
    except TimeFormatError as error:
        raise FaultSpecError(f"fault spec: {key}: {error}") from None
    if value < 0:
        raise FaultSpecError(f"fault spec: {key} must not be negative")
    return value


def _times_in_unit(record: dict[str, Any], display_unit: str) -> dict[str, Any]:
    """JSON times given as text without a unit are in the display unit, like typed ones."""
    for key in TIME_FIELDS:
        if isinstance(record.get(key), str):
            record[key] = _time_field(key, record[key], display_unit)
    return record


# -- applying changes -----------------------------------------------------------------------------


def uses_fabric_faults(world: World) -> bool:
    """Whether the world's faults are the fabric's records (installed with ``fabric.install``)."""
    return "fault_id_max" in world.fabric and "message_rules" in world.fabric


def drop_fault(world: World, fault_id: str) -> dict[str, Any]:
    """Remove one record from the schedule (see the module docstring); returns it."""
    if uses_fabric_faults(world):
        try:
            return fabric.remove_fault(world, fault_id)
        except KeyError:
            raise FaultSpecError(_unknown(world, fault_id)) from None
    for record in world.faults:
        if isinstance(record, dict) and record.get("id") == fault_id:
            world.faults.remove(record)
            _unschedule_any(world, fault_id)
            return record
    raise FaultSpecError(_unknown(world, fault_id))


def add_fault(world: World, item: Mapping[str, Any]) -> dict[str, Any]:
    """Validate and add a record with the fabric's rules; returns it with its id."""
    _require_fabric(world, "add")
    try:
        return fabric.add_fault(world, _listify(item))
    except ConfigError as error:
        raise FaultSpecError(_reword(error)) from None


def change_fault(world: World, fault_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Edit one record with the fabric's rules (``timetravel.fabric.edit``); returns it."""
    _require_fabric(world, "edit")
    if not any(isinstance(record, dict) and record.get("id") == fault_id for record in world.faults):
        raise FaultSpecError(_unknown(world, fault_id))
    kind = changes.get("kind") or next(r["kind"] for r in world.faults if r["id"] == fault_id)
    try:
        return fabric.edit_fault(world, fault_id, _listify({**changes, "kind": kind}))
    except ConfigError as error:
        raise FaultSpecError(_reword(error)) from None


def describe_fault(record: Mapping[str, Any]) -> str:
    """``f17 drop r3 950000000..990000000 ns {probability: 0.5}``: a record on one line."""
    window = f"{record.get('t_start')}..{record.get('t_end')} ns"
    params = record.get("params") or {}
    shown = {key: value for key, value in params.items() if value is not None}
    return f"{record.get('id')} {record.get('kind')} {record.get('target')} {window}" + (
        f" {shown}" if shown else ""
    )


def _require_fabric(world: World, verb: str) -> None:
    if not uses_fabric_faults(world):
        raise FaultSpecError(
            f"scenario {world.scenario} does not use the fabric's fault records: a branch can drop "
            f"its faults but not {verb} them"
        )


def _listify(item: Mapping[str, Any]) -> dict[str, Any]:
    """A single value for a list parameter (``kinds=grad``) as a list of one."""
    record = dict(item)
    params = dict(record.get("params") or {})
    specs = PARAM_SPECS.get(str(record.get("kind")), {})
    for name, value in params.items():
        checker = specs.get(name, ("", None))[0]
        if checker in LIST_CHECKERS and value is not None and not isinstance(value, list):
            params[name] = [value]
    record["params"] = params
    return record


def _unschedule_any(world: World, fault_id: str) -> None:
    """Remove pending ``fault`` events that name this fault (payload ``[id, ...]`` or ``{"id": id}``)."""

    def names_it(payload: Any) -> bool:
        if isinstance(payload, (list, tuple)) and payload:
            return payload[0] == fault_id
        return isinstance(payload, dict) and payload.get("id") == fault_id

    kept = [event for event in world.queue if not (event.kind == FAULT_KIND and names_it(event.payload))]
    if len(kept) != len(world.queue):
        world.queue[:] = kept
        heapq.heapify(world.queue)


def _unknown(world: World, fault_id: str) -> str:
    ids = [str(record.get("id")) for record in world.faults if isinstance(record, dict)]
    shown = ", ".join(ids[:20]) + (" ..." if len(ids) > 20 else "")
    return f"no fault {fault_id!r} in the schedule (faults: {shown or 'none'})"


def _reword(error: ConfigError) -> str:
    return str(error).removeprefix("config key 'faults': ")
