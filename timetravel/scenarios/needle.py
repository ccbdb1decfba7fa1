"""needle: a bug that takes two faults together, hidden among decoy faults (the minimizer's test bed).

A leader runs ``rounds`` rounds on a fixed clock (one every ``period``): it sends each worker the
round's value, and each worker adds it to its running total and acks with that total. The leader
checks every total against the sum it expects. A lost ack is survivable: after ``timeout`` the
leader sends the round again and the worker, which remembers the last round it applied,
acks without adding twice.

The planted bug (``bug=replay_after_restart``, the default): the worker keeps that memory only in
volatile state, so a worker that *restarts* between a dropped ack and the retransmit adds the
round twice, and the leader fails with ``assertion:needle.total``. Neither fault alone does
anything: the drop is retried, the restart loses nothing durable. ``bug=none`` keeps the memory
durable, and then no schedule fails.

``faults=needle`` (the default) draws ``decoys`` decoy faults — ``delay``, ``slow`` and ``jitter``
windows on random nodes, each bounded so that a message is never late enough to be resent — plus
the planted ``drop`` and ``restart`` on one worker in one round; ids ``f1``, ``f2``, … follow start
time, so the two planted faults sit among the decoys. The decoys cannot cause the failure, so the
minimal failing schedule is exactly the two planted faults: what ``timetravel bench minimize``
checks. ``faults=none`` runs without faults; an explicit JSON list of records runs that schedule.

A fault record is ``{"id", "kind", "target", "t_start", "t_end", "params"}``; applying one is an
event of kind ``fault`` at ``t_start`` on its target carrying the record.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim import Context, Event, Param, Scenario, ScenarioView, World, choose_world

PERIOD_NS = 4_000_000
TIMEOUT_NS = 1_000_000
RETRIES_MAX = 5
MESSAGE_BYTES = 64
DECOY_DELAY_NS_MAX = 100_000
DECOY_SLOW_NS_MAX = 100_000
DECOY_JITTER_NS_MAX = 50_000
DECOY_WINDOW_NS_MAX = PERIOD_NS
PLANTED_DROP_WINDOW_NS = 500_000
PLANTED_RESTART_OFFSET_NS = 700_000
DECOY_KINDS = ("delay", "slow", "jitter")
FAULT_KINDS = (*DECOY_KINDS, "drop", "restart")
FAULT_FIELDS = ("id", "kind", "target", "t_start", "t_end", "params")
FAULTS_MAX = 10_000
RECORD_SHOWN_CHARS_MAX = 120
"""A malformed fault record is quoted in its error up to this length."""
LEADER = "leader"


def worker_name(index: int) -> str:
    return f"w{index}"


def round_value(round_number: int) -> int:
    """The value a round adds: distinct per round, so adding one twice is always visible."""
    return round_number + 1


def expected_total(round_number: int) -> int:
    return sum(round_value(r) for r in range(round_number + 1))


# -- the fault schedule -------------------------------------------------------------------------


def draw_schedule(world: World, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The decoys and the planted pair, drawn from world-level choices, ids in start-time order."""
    workers = config["workers"]
    rounds = config["rounds"]
    nodes = [LEADER, *(worker_name(i) for i in range(workers))]
    horizon_ns = rounds * PERIOD_NS
    records: list[dict[str, Any]] = []
    for _ in range(config["decoys"]):
        kind = DECOY_KINDS[choose_world(world, "needle.decoy.kind", len(DECOY_KINDS))]
        t_start = choose_world(world, "needle.decoy.start", horizon_ns)
        window = 1 + choose_world(world, "needle.decoy.window", DECOY_WINDOW_NS_MAX)
        bound = {"delay": DECOY_DELAY_NS_MAX, "slow": DECOY_SLOW_NS_MAX, "jitter": DECOY_JITTER_NS_MAX}[kind]
        amount = 1 + choose_world(world, "needle.decoy.amount", bound)
        target = nodes[choose_world(world, "needle.decoy.target", len(nodes))]
        records.append(_record(kind, target, t_start, t_start + window, {"extra_ns": amount}))
    victim = worker_name(choose_world(world, "needle.planted.worker", workers))
    planted_round = rounds // 4 + choose_world(world, "needle.planted.round", max(1, rounds // 2))
    return with_planted_pair(records, victim, planted_round * PERIOD_NS, {"kind": "ack"}, "restart")


def with_planted_pair(
    records: list[dict[str, Any]],
    victim: str,
    round_start: int,
    drop_params: dict[str, Any],
    restart_kind: str,
) -> list[dict[str, Any]]:
    """``records`` and the planted pair on ``victim`` in the round starting at ``round_start`` (a
    ``drop`` with ``drop_params`` over the round's first PLANTED_DROP_WINDOW_NS, and a
    ``restart_kind`` fault PLANTED_RESTART_OFFSET_NS into it), sorted by start time with ids f1,
    f2, … in that order."""
    records.append(_record("drop", victim, round_start, round_start + PLANTED_DROP_WINDOW_NS, drop_params))
    restart_at = round_start + PLANTED_RESTART_OFFSET_NS
    records.append(_record(restart_kind, victim, restart_at, restart_at, {}))
    records.sort(key=lambda record: record["t_start"])
    for number, record in enumerate(records, start=1):
        record["id"] = f"f{number}"
    return records


def _record(kind: str, target: str, t_start: int, t_end: int, params: dict[str, Any]) -> dict[str, Any]:
    return {"id": "", "kind": kind, "target": target, "t_start": t_start, "t_end": t_end, "params": params}


def check_faults_setting(value: Any) -> None:
    """The ``faults`` key's own check (Param.validate): needle, none, or a schedule check_schedule takes."""
    if value not in ("needle", "none"):
        check_schedule(value)


def check_schedule(records: Any) -> list[dict[str, Any]]:
    """An explicit schedule from the config, checked field by field (it is user input)."""
    if not isinstance(records, list) or len(records) > FAULTS_MAX:
        raise ValueError(f"faults must be 'needle', 'none' or a list of at most {FAULTS_MAX} fault records")
    checked = []
    for record in records:
        if not isinstance(record, dict) or set(record) != set(FAULT_FIELDS):
            shown = repr(record) if len(repr(record)) <= RECORD_SHOWN_CHARS_MAX else "that record"
            raise ValueError(f"a fault record has exactly the fields {', '.join(FAULT_FIELDS)}, not {shown}")
        if not isinstance(record["id"], str) or not isinstance(record["target"], str):
            raise ValueError("a fault record's id and target are strings")
        if record["kind"] not in FAULT_KINDS:
            raise ValueError(f"fault {record['id']}: unknown kind {record['kind']!r}")
        if not all(isinstance(record[key], int) and record[key] >= 0 for key in ("t_start", "t_end")):
            raise ValueError(f"fault {record['id']}: t_start and t_end must be non-negative ints (ns)")
        if not isinstance(record["params"], dict):
            raise ValueError(f"fault {record['id']}: params must be a dict")
        checked.append(dict(record))
    return checked


# -- building -----------------------------------------------------------------------------------


def build(config: dict[str, Any], seed: int) -> World:
    world = World("needle", config, seed)
    world.fabric.update(latency_ns=config["latency"], jitter_ns=config["jitter"])
    world.add_node(
        LEADER, "leader", {"round": -1, "pending": [], "totals": {}, "retries": 0, **_fault_slots()}
    )
    for index in range(config["workers"]):
        world.add_node(worker_name(index), "worker", {"total": 0, "applied_round": -1, **_fault_slots()})
    faults = config["faults"]
    if faults == "needle":
        world.faults = draw_schedule(world, config)
    elif faults != "none":
        world.faults = check_schedule(faults)
    for record in world.faults:
        if record["target"] in world.nodes:
            world.schedule(record["t_start"], record["target"], "fault", record)
    world.schedule(0, LEADER, "round", 0)
    return world


def _fault_slots() -> dict[str, Any]:
    return {
        "drop_until": -1,
        "delay_until": -1,
        "delay_ns": 0,
        "slow_until": -1,
        "slow_ns": 0,
        "jitter_until": -1,
        "jitter_ns": 0,
    }


# -- the network --------------------------------------------------------------------------------


def transport(ctx: Context, dst: str, kind: str, payload: Any, nbytes: int) -> None:
    """Fixed latency and jitter, plus the sender's active fault windows (drop, delay, jitter)."""
    state, now = ctx.state, ctx.now
    if kind == "ack" and now <= state["drop_until"]:
        ctx.log(f"dropped {kind} to {dst}")
        return
    delay_ns = ctx.world.fabric["latency_ns"]
    jitter_ns = ctx.world.fabric["jitter_ns"]
    if jitter_ns:
        delay_ns += ctx.choose("net.jitter", jitter_ns + 1)
    if now <= state["delay_until"]:
        delay_ns += state["delay_ns"]
    if now <= state["jitter_until"]:
        delay_ns += ctx.choose("needle.fault.jitter", state["jitter_ns"] + 1)
    ctx.deliver(now + delay_ns, dst, kind, payload)


# -- handlers -----------------------------------------------------------------------------------


def apply_fault(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A fault takes effect on its target: open a window, or restart the node."""
    record = event.payload
    kind, t_end, params = record["kind"], record["t_end"], record["params"]
    ctx.log(f"fault {record['id']} {kind}")
    if kind == "restart":
        if ctx.config["bug"] == "replay_after_restart":
            state["applied_round"] = -1
        return
    if kind == "drop":
        state["drop_until"] = max(state["drop_until"], t_end)
        return
    state[f"{kind}_until"] = t_end
    state[f"{kind}_ns"] = int(params.get("extra_ns", 0))


def leader_round(state: dict[str, Any], event: Event, ctx: Context) -> None:
    round_number = event.payload
    if state["pending"]:
        ctx.fail(
            "hang",
            f"round {state['round']} still waits for {', '.join(state['pending'])}",
            site="needle.round",
        )
        return
    state["round"] = round_number
    state["retries"] = 0
    state["pending"] = [worker_name(i) for i in range(ctx.config["workers"])]
    for worker in state["pending"]:
        ctx.send(worker, "work", [round_number, round_value(round_number)], MESSAGE_BYTES)
    ctx.timer(TIMEOUT_NS, "timeout", round_number)
    if round_number + 1 < ctx.config["rounds"]:
        ctx.timer(PERIOD_NS, "round", round_number + 1)


def leader_timeout(state: dict[str, Any], event: Event, ctx: Context) -> None:
    if event.payload != state["round"] or not state["pending"]:
        return
    if state["retries"] >= RETRIES_MAX:
        ctx.fail("hang", f"round {state['round']}: no ack after {RETRIES_MAX} retries", site="needle.retry")
        return
    state["retries"] += 1
    ctx.metric("retransmits", len(state["pending"]))
    for worker in state["pending"]:
        ctx.send(worker, "work", [state["round"], round_value(state["round"])], MESSAGE_BYTES)
    ctx.timer(TIMEOUT_NS, "timeout", state["round"])


def leader_ack(state: dict[str, Any], event: Event, ctx: Context) -> None:
    round_number, worker, total = event.payload
    if round_number != state["round"] or worker not in state["pending"]:
        return
    state["pending"].remove(worker)
    state["totals"][worker] = total
    expected = expected_total(round_number)
    if total != expected:
        ctx.fail(
            "assertion",
            f"{worker} reports total {total} after round {round_number}, expected {expected}",
            site="needle.total",
            node=worker,
        )
        return
    if not state["pending"]:
        ctx.metric("round_done_ns", ctx.now - round_number * PERIOD_NS)


def worker_work(state: dict[str, Any], event: Event, ctx: Context) -> None:
    round_number, value = event.payload
    if round_number > state["applied_round"]:
        state["total"] += value
        state["applied_round"] = round_number
    reply = [round_number, ctx.node, state["total"]]
    if ctx.now <= state["slow_until"]:
        ctx.timer(state["slow_ns"], "reply", reply)
    else:
        ctx.send(LEADER, "ack", reply, MESSAGE_BYTES)


def worker_reply(state: dict[str, Any], event: Event, ctx: Context) -> None:
    ctx.send(LEADER, "ack", event.payload, MESSAGE_BYTES)


def summarize(world: World) -> dict[str, Any]:
    leader = world.nodes[LEADER]
    return {"rounds_done": leader["round"] + 1, "faults": len(world.faults)}


SCENARIO = Scenario(
    name="needle",
    summary="a bug that needs two faults together, hidden among decoy faults: the minimizer's test bed",
    params=(
        Param("workers", "int", 8, "workers the leader sends each round to", minimum=1, shrinkable=True),
        Param("rounds", "int", 40, "rounds, one every 4 ms", minimum=1, shrinkable=True),
        Param("latency", "time", 10_000, "one-way latency of every message"),
        Param("jitter", "time", 2_000, "extra latency per message, drawn in [0, jitter] (site net.jitter)"),
        Param("decoys", "int", 100, "decoy faults drawn by faults=needle", minimum=0),
        Param(
            "faults",
            "json",
            "needle",
            "needle (decoys + the planted pair), none, or an explicit list of fault records",
            validate=check_faults_setting,
        ),
        Param(
            "bug",
            "str",
            "replay_after_restart",
            "the planted bug; none keeps the worker's last applied round durable",
            choices=("replay_after_restart", "none"),
            branchable=True,
        ),
    ),
    build=build,
    handlers={
        "leader": {"round": leader_round, "timeout": leader_timeout, "ack": leader_ack, "fault": apply_fault},
        "worker": {"work": worker_work, "reply": worker_reply, "fault": apply_fault},
    },
    transport=transport,
    summarize=summarize,
    view=ScenarioView(rank_role="worker", fault_states={"slow": "slow"}),
)
