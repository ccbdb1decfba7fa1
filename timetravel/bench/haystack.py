"""haystack: needle's two-fault bug over the fabric, among decoys that draw coins but never fire.

The protocol and the planted bug are needle's (timetravel/scenarios/needle.py): a leader sends
each worker one round every 4 ms, a lost ack is resent after 1 ms, and a worker that restarts
between a dropped ack and the resend adds the round twice (``assertion:needle.total``). Here the
faults are the fabric's own records (fabric/faults.py), so the minimizer meets what a user's
scenario gives it: probabilistic message faults whose coins are choices.

``faults=haystack`` (the default) draws ``decoys`` decoys and the planted pair from world-level
choices, ids in start-time order:

* the planted pair, on one worker in one round: a ``drop`` of its acks with probability 1/2 over
  the first 0.5 ms of the round (so whether the seed fails is one coin), and a ``crash`` with an
  immediate restart 0.7 ms into the round (the restart hook forgets the last applied round);
* **coin decoys**: ``drop`` faults on workers' acks with probability 0 over half the run. Each
  draws a coin for every ack it matches and never fires. When fault coins were drawn at a site
  shared by every drop fault of a sender, removing one of these shifted the planted drop's coin,
  the failure vanished for a reason unrelated to the removed decoy, and the minimizer kept decoys
  that never fired;
* **firing decoys**: ``delay`` (at most 100 us), ``duplicate`` and ``reorder`` (at most 50 us)
  faults with probability 1/2 on any node's messages, and ``slow`` windows: they bite, but no
  message ends up late enough to be resent, and no duplicate outlives a restart.

So the minimal failing schedule is exactly the planted pair, when the seed fails at all (the
planted coin comes up on about half the seeds): what ``timetravel bench minimize`` checks.
``bug=none`` keeps the worker's memory across the restart, and then no schedule fails.
"""

from __future__ import annotations

from typing import Any

from timetravel.fabric import Hooks, fabric_params, install, transport, with_handlers
from timetravel.scenarios import needle
from timetravel.sim import Param, Scenario, World, choose_world

NAME = "haystack"
DECOYS_DEFAULT = 60
COIN_DECOY_SHARE = 3
"""One decoy in COIN_DECOY_SHARE is a coin decoy (a drop with probability 0)."""
FIRING_KINDS = ("delay", "duplicate", "reorder", "slow")
PLANTED_PROBABILITY = 0.5
DECOY_DELAY_NS_MAX = 100_000
DECOY_REORDER_WINDOW_NS_MAX = 50_000
DECOY_WINDOW_NS_MAX = needle.PERIOD_NS


def draw_schedule(world: World, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The decoys and the planted pair (see the module docstring), ids f1, f2, … in start-time order."""
    workers = [needle.worker_name(index) for index in range(config["workers"])]
    nodes = [needle.LEADER, *workers]
    horizon_ns = config["rounds"] * needle.PERIOD_NS
    records = []
    for number in range(config["decoys"]):
        if number % COIN_DECOY_SHARE == 0:
            target = workers[choose_world(world, "haystack.coin.target", len(workers))]
            t_start = choose_world(world, "haystack.coin.start", horizon_ns // 2)
            params: dict[str, Any] = {"kinds": ["ack"], "probability": 0.0}
            records.append(_record("drop", target, t_start, t_start + horizon_ns // 2, params))
            continue
        kind = FIRING_KINDS[choose_world(world, "haystack.decoy.kind", len(FIRING_KINDS))]
        target = nodes[choose_world(world, "haystack.decoy.target", len(nodes))]
        t_start = choose_world(world, "haystack.decoy.start", horizon_ns)
        t_end = t_start + 1 + choose_world(world, "haystack.decoy.window", DECOY_WINDOW_NS_MAX)
        params = {} if kind == "slow" else {"probability": 0.5}
        if kind == "delay":
            params["delay_ns"] = 1 + choose_world(world, "haystack.decoy.delay", DECOY_DELAY_NS_MAX)
        elif kind == "reorder":
            params["window_ns"] = 1 + choose_world(
                world, "haystack.decoy.reorder", DECOY_REORDER_WINDOW_NS_MAX
            )
        records.append(_record(kind, target, t_start, t_end, params))
    victim = workers[choose_world(world, "haystack.planted.worker", len(workers))]
    rounds = config["rounds"]
    planted_round = rounds // 4 + choose_world(world, "haystack.planted.round", max(1, rounds // 2))
    drop = {"kinds": ["ack"], "probability": PLANTED_PROBABILITY}
    return needle.with_planted_pair(records, victim, planted_round * needle.PERIOD_NS, drop, "crash")


def planted_ids(world: World) -> list[str]:
    """The ids of the planted pair in a built world's schedule (known by construction)."""
    return [
        record["id"]
        for record in world.faults
        if record["kind"] == "crash"
        or (record["kind"] == "drop" and record["params"]["probability"] == PLANTED_PROBABILITY)
    ]


def _record(kind: str, target: str, t_start: int, t_end: int, params: dict[str, Any]) -> dict[str, Any]:
    return {"id": "", "kind": kind, "target": target, "t_start": t_start, "t_end": t_end, "params": params}


def on_restart(state: dict[str, Any], ctx: Any, record: dict[str, Any]) -> None:
    """The planted bug: the last applied round was volatile, and the restart lost it."""
    if ctx.config["bug"] == "replay_after_restart":
        state["applied_round"] = -1


HOOKS = Hooks(on_restart=on_restart)


def build(config: dict[str, Any], seed: int) -> World:
    world = World(NAME, config, seed)
    world.add_node(needle.LEADER, "leader", {"round": -1, "pending": [], "totals": {}, "retries": 0})
    workers = [needle.worker_name(index) for index in range(config["workers"])]
    for name in workers:
        world.add_node(name, "worker", {"total": 0, "applied_round": -1, "slow_until": -1, "slow_ns": 0})
    if config["faults"] == NAME:
        world.config = {**config, "faults": draw_schedule(world, config)}
    install(world, [needle.LEADER, *workers], hooks=HOOKS)
    world.schedule(0, needle.LEADER, "round", 0)
    return world


SCENARIO = Scenario(
    name=NAME,
    summary="needle's two-fault bug over the fabric, among decoys that draw coins but never fire",
    params=(
        Param("workers", "int", 8, "workers the leader sends each round to", minimum=1, shrinkable=True),
        Param("rounds", "int", 40, "rounds, one every 4 ms", minimum=1, shrinkable=True),
        Param("decoys", "int", DECOYS_DEFAULT, "decoy faults drawn by faults=haystack", minimum=0),
        Param(
            "bug",
            "str",
            "replay_after_restart",
            "the planted bug; none keeps the worker's last applied round across a restart",
            choices=("replay_after_restart", "none"),
            branchable=True,
        ),
        *fabric_params(faults=NAME),
    ),
    build=build,
    handlers=with_handlers(
        {
            "leader": {
                "round": needle.leader_round,
                "timeout": needle.leader_timeout,
                "ack": needle.leader_ack,
            },
            "worker": {"work": needle.worker_work},
        },
        HOOKS,
    ),
    transport=transport,
)
