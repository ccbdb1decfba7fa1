"""Hangs and the flight recorder of the c10d node: who waits for whom, told as NCCL's recorder would.

A rank waiting longer than ``hang_timeout`` in a collective, or still waiting when the run ends, is
a ``hang`` whose ``node`` is the rank being waited for; the failure holds ``waiting_for`` and the
``flight_recorder`` table (per rank: its last collectives entered and completed, how it ended and
whom its pending collective waits on). Plain functions over the c10d node's state (plain data).
"""

from __future__ import annotations

from typing import Any

from timetravel.sim.context import Context
from timetravel.sim.event import Event
from timetravel.sim.timefmt import format_time_auto
from timetravel.sim.world import World
from timetravel.torch.protocol.limits import FLIGHT_RECORDER_ENTRIES
from timetravel.torch.world import collectives, digests
from timetravel.torch.world.specs import C10D_NODE


def timeout_ns(waiting: dict[str, Any], config: dict[str, Any]) -> int:
    """A waiting rank's hang timeout: its group's ``timeout=`` (or its wait's), else ``hang_timeout``."""
    own = waiting.get("timeout_ns")
    return int(own) if own is not None else int(config["hang_timeout"])


def earliest_deadline(state: dict[str, Any], config: dict[str, Any]) -> tuple[int, int] | None:
    """(deadline, rank) of the waiting rank whose timeout runs out first; None when nobody waits in a
    collective (a store call is answered by the store's own timeout, as torch's store raises)."""
    deadlines = [
        (waiting["since_ns"] + timeout_ns(waiting, config), int(rank))
        for rank, waiting in state["waiting"].items()
        if not waiting.get("store")
    ]
    return min(deadlines) if deadlines else None


def check_deadlines(state: dict[str, Any], ctx: Context) -> None:
    """Fail ``hang`` when a waiting rank's timeout has run out by now (at its deadline)."""
    earliest = earliest_deadline(state, ctx.world.config)
    if earliest is not None and earliest[0] <= ctx.now:
        fail_hang(state, ctx, earliest[1], earliest[0])


def on_deadline(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A waiting rank's timeout runs out now, unless what it waits for arrived meanwhile."""
    check_deadlines(state, ctx)


def arm_deadline(state: dict[str, Any], ctx: Context) -> None:
    """A rank started waiting: if an event later than the earliest deadline is already queued, put a
    ``deadline`` event at that deadline, so the hang is found when its timeout runs out, not at
    whatever comes next. Never otherwise: a run whose waits all end in time gets no extra event."""
    earliest = earliest_deadline(state, ctx.world.config)
    if earliest is None or earliest[0] < ctx.now:
        return
    if any(event[0] > earliest[0] for event in ctx.world.queue):
        ctx.deliver(earliest[0], C10D_NODE, "deadline", earliest[0])


def deadline_before(state: dict[str, Any], config: dict[str, Any], t_ns: int) -> int | None:
    """The earliest waiting deadline when it falls before ``t_ns`` (a rank is about to schedule an
    event then: the deadline must come first), else None."""
    earliest = earliest_deadline(state, config)
    return earliest[0] if earliest is not None and earliest[0] < t_ns else None


def report_hang(world: World, ctx: Context) -> None:
    """At the end of the run: a rank still waiting means some member never entered its collective."""
    state = world.nodes["c10d"]
    if not state["waiting"]:
        unfinished = [rank for rank in range(state["ranks"]) if str(rank) not in state["exited"]]
        if unfinished:  # every rank either exits or waits: anything else is a lost event, never a pass
            ctx.fail(
                "hang",
                f"r{unfinished[0]} neither finished nor waits in a collective",
                "torch.collective.lost",
                node=f"r{unfinished[0]}",
            )
        return
    earliest = earliest_deadline(state, world.config)
    if earliest is None:  # only store calls wait, and the store left them waiting: never, but say so
        rank = min(int(rank) for rank in state["waiting"])
        earliest = (state["waiting"][str(rank)]["since_ns"] + world.config["hang_timeout"], rank)
    fail_hang(state, ctx, earliest[1], earliest[0])


def fail_hang(state: dict[str, Any], ctx: Context, rank: int, t_ns: int) -> None:
    if _fails_on_pending_nonfinite(state, ctx, t_ns):
        return
    pending = pending_for(state, rank)
    if (
        pending is None
    ):  # its own contribution never reached the reducer (a drop): tell it as the others see it
        rank, pending = _described_by_another(state, rank)
    missing = (
        [member for member in pending["members"] if str(member) not in pending["entered"]] if pending else []
    )
    culprit = missing[0] if missing else rank
    exited = [member for member in missing if str(member) in state["exited"]]
    why = ""
    if pending is not None and not missing and state["ops"].get(pending["key"], {}).get("held_by_partition"):
        why = f" in {pending['what']} (collective {pending['key']}): every member entered; a partition that never heals holds it"
    elif pending is not None:
        how = f"; r{exited[0]} had already exited" if exited else ""
        why = f" in {pending['what']} (collective {pending['key']}), waiting for {', '.join(f'r{m}' for m in missing)}{how}"
    ctx.now = max(ctx.now, t_ns)
    waited = timeout_ns(state["waiting"][str(rank)], ctx.world.config) if str(rank) in state["waiting"] else 0
    ctx.fail(
        "hang",
        f"r{rank} waited {_seconds(waited)}{why}",
        "torch.collective.hang",
        node=f"r{culprit}",
    )
    ctx.world.failures[-1].update(
        waiting_for=[f"r{member}" for member in missing],
        waiting=f"r{rank}",
        flight_recorder=flight_table(state),
    )


def _seconds(t_ns: int) -> str:
    """``600 s`` for whole seconds, else the time as the rest of the output shows it (``2.5s``)."""
    return f"{t_ns // 1_000_000_000} s" if t_ns % 1_000_000_000 == 0 else format_time_auto(t_ns)


def _fails_on_pending_nonfinite(state: dict[str, Any], ctx: Context, t_ns: int) -> bool:
    """A collective that never completes but into which a rank fed a NaN or Inf is a ``nan``, as it
    would have been had every member entered (the nan detector waits for all of them to name them
    all): the earliest such collective, naming the ranks that entered it."""
    if not ctx.world.config["detect_nan"]:
        return False
    held = [
        (min(entry["t_ns"] for entry in record["entries"].values()), key, record)
        for key, record in state["ops"].items()
        if any("nonfinite" in entry for entry in record["entries"].values())
    ]
    if not held:
        return False
    _t_ns, key, record = min(held, key=lambda item: (item[0], item[1]))
    _group, _, seq = key.rpartition("#")
    ctx.now = max(ctx.now, t_ns)
    digests.fail_nonfinite(
        list(record["entries"].values()), key, record["group"], int(seq) if seq.isdigit() else seq, ctx
    )
    return True


def _described_by_another(state: dict[str, Any], rank: int) -> tuple[int, dict[str, Any] | None]:
    """A waiting rank in no collective (what it fed was dropped): the earliest other waiting rank
    whose collective lacks it, so the hang names what waits for whom; else the rank itself."""
    waiting = sorted(state["waiting"].items(), key=lambda item: (item[1]["since_ns"], int(item[0])))
    for other, _waiting in waiting:
        pending = pending_for(state, int(other))
        if pending is not None and str(rank) not in pending["entered"] and rank in pending["members"]:
            return int(other), pending
    return rank, None


def pending_for(state: dict[str, Any], rank: int) -> dict[str, Any] | None:
    for key, record in state["ops"].items():
        if str(rank) in record["entries"] or any(
            entry.get("rank") == rank for entry in record["entries"].values()
        ):
            entry = record["entries"].get(str(rank)) or next(iter(record["entries"].values()))
            members = record["members"] or [entry["rank"], *[e["rank"] for e in record["entries"].values()]]
            entered = {str(e["rank"]) for e in record["entries"].values()}
            return {"key": key, "members": members, "entered": entered, "what": collectives.describe(entry)}
    return None


def flight_enter(state: dict[str, Any], rank: int, key: str, entry: dict[str, Any]) -> None:
    log = state["flight"][str(rank)]
    log.append(
        {
            "key": key,
            "id": entry["id"],
            "what": collectives.describe(entry),
            "state": "entered",
            "t_enter_ns": entry["t_ns"],
        }
    )
    if len(log) > FLIGHT_RECORDER_ENTRIES:
        del log[0]


def _waits_on(state: dict[str, Any], rank: int) -> list[str]:
    """The members a waiting rank's pending collective still lacks (what the TUI shows it blocked on)."""
    if str(rank) not in state["waiting"]:
        return []
    pending = pending_for(state, rank)
    if pending is None:
        return []
    return [f"r{member}" for member in pending["members"] if str(member) not in pending["entered"]]


def flight_table(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Per rank: its last collectives (entered and completed) and how it ended, as in NCCL's recorder."""
    table = []
    for rank in range(state["ranks"]):
        log = state["flight"][str(rank)]
        exited = state["exited"].get(str(rank))
        table.append(
            {
                "rank": f"r{rank}",
                "last_entered": log[-1]["key"] if log else None,
                "last_completed": next(
                    (item["key"] for item in reversed(log) if item["state"] == "completed"), None
                ),
                "status": "exited"
                if exited is not None
                else ("waiting" if str(rank) in state["waiting"] else "running"),
                "waits_on": _waits_on(state, rank),
                "entries": [dict(item) for item in log[-4:]],
            }
        )
    return table
