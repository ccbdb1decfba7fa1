"""Which fault records can explain a torch run's failure (coordinator side, plain data; no torch here).

``explain`` follows values unlike their peers' back to a fault. On a torch run that rule meets the
World's bookkeeping first: a replica that drifted after a flipped bit, or a hang behind a dropped
contribution, shows nothing unlike its peers but its ``calls`` counter, which leads nowhere. The
faults themselves say what they did — each record counts its hits in ``fabric/fault_hits`` and logs
one line per hit, ``[t_ns, node, "fault f1 (corrupt) on r1: all_reduce result: element 56 bit 19:
..."]`` (torch/faults.py) — so this module answers from the world the failure ended in:

* :func:`involved` — the ranks a failure involves (its node; a divergence's minority, or every side
  of a split with no majority; a hang's waiting and awaited ranks; every rank a nan names) and the collective it names
  (a hang's pending collective, a mismatch's);
* :func:`acted` — every fault that acted before the failure, with its first hit's time, node and
  line (explore/explain_torch.py finds the event of that hit and the collective it was in);
* :func:`explains` — whether a hit can explain the failure: a fault of a kind that causes a failure
  of this kind (:data:`CAUSES`), on a rank it involves or in the collective it names;
* :func:`no_fault_text` — the honest line when none does: the failure is the script's own.
"""

from __future__ import annotations

import re
from typing import Any

from timetravel.sim.event import Event
from timetravel.sim.world import World

CAUSES: dict[str, tuple[str, ...]] = {
    "divergence": ("corrupt",),
    "nan": ("corrupt",),
    "hang": ("drop", "partition"),
    "crash": ("crash",),
    "resume_mismatch": ("crash",),
    "silent_corruption": ("corrupt",),
}
"""Failure kind -> the fault kinds that can cause it. A straggler or a delay is survivable (the same
bits, later), so it explains no failure; a mismatch, an exception, ``stuck`` or ``unsupported`` come
from the script's code whatever the cluster does. A resume_mismatch follows a crash: the crash made
the restart, the resume the script wrote made the difference."""
C10D_NODE = "c10d"
_HUNG_COLLECTIVE = re.compile(r"\(collective ([^)\s]+)\)")


def full_failure(world: World, failure: dict[str, Any]) -> dict[str, Any]:
    """The world's own record of ``failure`` (with the detector's fields: ``minority``,
    ``waiting_for``, ``step``, ...), which a recording's end keeps only in its public part."""
    for record in world.failures:
        if all(record.get(key) == failure.get(key) for key in ("kind", "node", "t_ns")):
            return dict(record)
    return dict(failure)


def involved(failure: dict[str, Any]) -> tuple[list[str], str | None]:
    """The ranks ``failure`` involves (in order, without repeats) and the collective it names."""
    ranks: list[str] = []
    candidates: list[Any] = [
        failure.get("node"),
        *(failure.get("minority") or []),
        *(failure.get("ranks") or []),
    ]
    if failure.get("kind") == "divergence" and not failure.get("minority"):
        candidates += [rank for side in failure.get("split") or [] for rank in side]
    candidates += [failure.get("waiting"), *(failure.get("waiting_for") or [])]
    for rank in candidates:
        if isinstance(rank, str) and rank and rank not in ranks:
            ranks.append(rank)
    collective = failure.get("collective")
    if not isinstance(collective, str) and failure.get("kind") == "hang":
        found = _HUNG_COLLECTIVE.search(str(failure.get("message", "")))
        collective = found.group(1) if found else None
    return ranks, collective if isinstance(collective, str) else None


def acted(world: World, failure: dict[str, Any]) -> list[dict[str, Any]]:
    """Every fault record that acted by the failure's time, first hit first: ``id``, ``kind``,
    ``target``, ``record`` and, from its first hit's log line, ``t_ns``, ``node`` and ``line``
    (None when the bounded log dropped that line)."""
    hits = world.fabric.get("fault_hits", {}) if isinstance(world.fabric, dict) else {}
    first_lines: dict[str, list[Any]] = {}
    for entry in world.log:
        if len(entry) != 3 or not str(entry[2]).startswith("fault "):
            continue
        fault_id = str(entry[2]).split(" ", 2)[1]
        first_lines.setdefault(fault_id, entry)
    found = []
    limit = failure.get("t_ns")
    for record in world.faults:
        fault_id = str(record.get("id"))
        if not hits.get(fault_id):
            continue
        line = first_lines.get(fault_id)
        if line is not None and isinstance(limit, int) and int(line[0]) > limit:
            continue  # it acted after the failure: it cannot have caused it
        found.append(
            {
                "id": fault_id,
                "kind": record.get("kind"),
                "target": record.get("target"),
                "record": record,
                "t_ns": int(line[0]) if line is not None else None,
                "node": str(line[1]) if line is not None else None,
                "line": str(line[2]) if line is not None else None,
            }
        )
    found.sort(key=lambda fault: (fault["t_ns"] is None, fault["t_ns"] or 0))
    return found


def collective_of(event: Event) -> dict[str, Any] | None:
    """The collective a call to c10d enters (``op``, ``collective`` key, ``group``, ``seq``), or None."""
    payload = event.payload
    if event.dst != C10D_NODE or not isinstance(payload, dict) or "op" not in payload:
        return None
    op = str(payload["op"])
    if op in ("send", "recv") and "pair" in payload:
        key = f"p2p:{payload['pair']}#{payload.get('seq')}"
    else:
        key = f"{payload.get('group')}#{payload.get('seq')}"
    return {"op": op, "collective": key, "group": payload.get("group"), "seq": payload.get("seq")}


def explains(fault: dict[str, Any], collective: dict[str, Any] | None, failure: dict[str, Any]) -> str:
    """Why this hit explains ``failure`` (a verb phrase for the chain's ``because``), '' if it does not."""
    kind = str(failure.get("kind"))
    if fault["kind"] not in CAUSES.get(kind, ()):
        return ""
    ranks, named = involved(failure)
    key = collective["collective"] if collective is not None else None
    if named is not None and key == named:
        return f"hit {key}, the collective the {kind} names"
    if fault["target"] in ranks:
        role = "the replica that drifted" if kind == "divergence" else f"the rank the {kind} names"
        if kind in ("hang", "nan") and fault["target"] != failure.get("node"):
            role = f"a rank the {kind} involves"
        return f"hit {fault['target']}, {role}"
    return ""


def hit_text(fault: dict[str, Any], collective: dict[str, Any] | None) -> str:
    """``fault f1 (corrupt) acted on r1 in all_reduce 0#10 (group 0, seq 10): result: element 56 bit
    19: ...`` — the fault, the rank, the collective and what the hit did (its log line)."""
    head = f"fault {fault['id']} ({fault['kind']}) acted on {fault['target']}"
    detail = str(fault.get("line") or "")
    prefix = f"fault {fault['id']} ({fault['kind']}) on {fault['target']}: "
    detail = detail[len(prefix) :] if detail.startswith(prefix) else ""
    if collective is not None:
        op = collective["op"]
        head += f" in {op} {collective['collective']} (group {collective['group']}, seq {collective['seq']})"
        detail = detail[len(op) + 1 :] if detail.startswith(op + " ") else detail
    return f"{head}: {detail}" if detail else head


def no_fault_text(world: World, failure: dict[str, Any], faults: list[dict[str, Any]]) -> str:
    """Said when no fault explains the failure: what the schedule held and did, and whose it is."""
    kind = str(failure.get("kind"))
    ranks, named = involved(failure)
    where = ", ".join(ranks) or "any rank"
    if not world.faults:
        schedule = "the fault schedule is empty"
    elif not faults:
        schedule = f"none of its {len(world.faults)} fault record(s) acted before it"
    else:
        acted_text = ", ".join(f"{fault['id']} ({fault['kind']}) on {fault['target']}" for fault in faults)
        causes = CAUSES.get(kind, ())
        if causes:
            place = f"{where} or {named}" if named else where
            schedule = f"{acted_text} acted, but no {'/'.join(causes)} fault hit {place}"
        else:
            schedule = f"{acted_text} acted, but no fault kind causes a {kind}"
    return (
        f"no fault explains it: {schedule}; the {kind} is the script's own doing "
        f"(its code on {failure.get('node') or where}: see the step below)"
    )


__all__ = [
    "CAUSES",
    "acted",
    "collective_of",
    "explains",
    "full_failure",
    "hit_text",
    "involved",
    "no_fault_text",
]
