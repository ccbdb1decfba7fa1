"""``timetravel bench fabric``: messages per wall second through the fabric, against SimPy's natural model.

Two traffic patterns, each run by timetravel (the fabric transport, a handler per message) and by
SimPy written the way one naturally would: a process per message and a ``simpy.Resource`` per
link, holding each link for the message's serialization time and then waiting out its latency.

* **all-to-all, 64 ranks**: every rank sends one 64 KiB message to each of the 63 others; a rank
  starts its next burst when it has heard from everyone. NVLink inside hosts, spines across leaves,
  ECMP per message, and heavy incast on every NIC.
* **ring, 1024 ranks**: every rank passes a 1 MiB chunk to the next, as the steps of a ring
  all-reduce do; ``RING_ROUNDS`` rounds.

Both sides take the same paths (the SimPy model draws its ECMP spine from the same counter-based
choice function), so they do the same work; SimPy's model is store-and-forward per link where
ours is cut-through, which changes arrival times, not the amount of work. Jitter is off. Figures
are messages per wall second, best of 3; ``*_ratio_vs_simpy`` is ours over SimPy's.
"""

from __future__ import annotations

from typing import Any

from timetravel import fabric
from timetravel.bench.timing import best_of
from timetravel.fabric.topology import Topology, serialization_ns
from timetravel.sim import Context, Event, Param, Scenario, Simulation, World
from timetravel.sim.choices import draw, stream_base

ALLTOALL_RANKS = 64
ALLTOALL_BYTES = 64 * 1024
ALLTOALL_BURSTS = 24
RING_RANKS = 1024
RING_BYTES = 1024 * 1024
RING_ROUNDS = 96
QUICK_DIVISOR = 8


def _build(config: dict[str, Any], seed: int) -> World:
    world = World("bench.fabric", config, seed)
    ranks = [f"r{index}" for index in range(config["ranks"])]
    for name in ranks:
        world.add_node(name, "rank", {"heard": 0, "burst": 0})
        world.schedule(0, name, "start")
    fabric.install(world, ranks)
    return world


def _alltoall_send(ctx: Context, burst: int) -> None:
    ranks = ctx.config["ranks"]
    me = int(ctx.node[1:])
    for offset in range(1, ranks):
        ctx.send(f"r{(me + offset) % ranks}", "message", burst, ALLTOALL_BYTES)


def _alltoall_start(state: dict[str, Any], event: Event, ctx: Context) -> None:
    _alltoall_send(ctx, 0)


def _alltoall_message(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["heard"] += 1
    if (
        state["heard"] == (ctx.config["ranks"] - 1) * (state["burst"] + 1)
        and state["burst"] + 1 < ctx.config["rounds"]
    ):
        state["burst"] += 1
        _alltoall_send(ctx, state["burst"])


def _ring_start(state: dict[str, Any], event: Event, ctx: Context) -> None:
    me = int(ctx.node[1:])
    ctx.send(f"r{(me + 1) % ctx.config['ranks']}", "message", 0, RING_BYTES)


def _ring_message(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["heard"] += 1
    if event.payload + 1 < ctx.config["rounds"]:
        me = int(ctx.node[1:])
        ctx.send(f"r{(me + 1) % ctx.config['ranks']}", "message", event.payload + 1, RING_BYTES)


def _scenario(name: str, start: Any, message: Any) -> Scenario:
    return Scenario(
        name=name,
        summary="fabric benchmark traffic",
        params=(
            Param("ranks", "int", 64, "ranks"),
            Param("rounds", "int", 1, "bursts or rounds"),
            *fabric.fabric_params(),
        ),
        build=_build,
        handlers=fabric.with_handlers({"rank": {"start": start, "message": message}}),
        transport=fabric.transport,
    )


ALLTOALL = _scenario("bench.fabric.alltoall", _alltoall_start, _alltoall_message)
RING = _scenario("bench.fabric.ring", _ring_start, _ring_message)


def timetravel_messages(scenario: Scenario, ranks: int, rounds: int) -> tuple[int, int]:
    """Run the pattern; return (messages delivered, simulated end time in ns)."""
    config = scenario.resolve_config({"ranks": ranks, "rounds": rounds, "network_jitter": 0})
    world = scenario.build(config, 1)
    result = Simulation(scenario, world).run()
    assert result.outcome == "pass", result.failure
    return sum(state["heard"] for state in world.nodes.values()), result.t_end_ns


def _topology(ranks: int) -> Topology:
    config = ALLTOALL.resolve_config({"ranks": ranks})
    return Topology.from_data(ALLTOALL.build(config, 1).fabric["topology"])


def simpy_messages(pattern: str, ranks: int, rounds: int) -> tuple[int, int]:
    """The same pattern in SimPy: a process per message, a Resource per link."""
    import simpy

    topology = _topology(ranks)
    env = simpy.Environment()
    links = [simpy.Resource(env, capacity=1) for _ in range(topology.link_count)]
    latency = topology.latency_table()
    bandwidth = topology.bandwidth_table()
    ecmp_bases = [stream_base(1, 0, f"r{rank}", "fabric.ecmp") for rank in range(ranks)]
    ecmp_counts = [0] * ranks
    heard = [0] * ranks
    bursts = [0] * ranks
    nbytes = ALLTOALL_BYTES if pattern == "alltoall" else RING_BYTES

    def route(source: int, destination: int) -> list[int]:
        spine = 0
        if topology.crosses_spine(source, destination) and topology.spines > 1:
            spine = draw(ecmp_bases[source], ecmp_counts[source], topology.spines)
            ecmp_counts[source] += 1
        return topology.path(source, destination, spine)

    def message(source: int, destination: int, payload: int) -> Any:
        for link in route(source, destination):
            with links[link].request() as request:
                yield request
                yield env.timeout(serialization_ns(nbytes, bandwidth[link]))
            yield env.timeout(latency[link])
        receive(destination, payload)

    def send(source: int, destination: int, payload: int) -> None:
        env.process(message(source, destination, payload))

    def receive(rank: int, payload: int) -> None:
        heard[rank] += 1
        if pattern == "ring":
            if payload + 1 < rounds:
                send(rank, (rank + 1) % ranks, payload + 1)
        elif heard[rank] == (ranks - 1) * (bursts[rank] + 1) and bursts[rank] + 1 < rounds:
            bursts[rank] += 1
            burst(rank)

    def burst(rank: int) -> None:
        for offset in range(1, ranks):
            send(rank, (rank + offset) % ranks, bursts[rank])

    for rank in range(ranks):
        if pattern == "ring":
            send(rank, (rank + 1) % ranks, 0)
        else:
            burst(rank)
    env.run()
    return sum(heard), int(env.now)


def _pair(
    label: str, ours: tuple[float, tuple[int, int]], theirs: tuple[float, tuple[int, int]]
) -> dict[str, Any]:
    wall, (messages, t_end_ns) = ours
    simpy_wall, (simpy_count, _simpy_end) = theirs
    assert messages == simpy_count, f"{label}: {messages} messages here, {simpy_count} in SimPy"
    rate = messages / wall
    simpy_rate = simpy_count / simpy_wall
    return {
        f"{label}_messages": messages,
        f"{label}_simulated_ms": round(t_end_ns / 1e6, 3),
        f"{label}_messages_per_s": round(rate),
        f"{label}_simpy_messages_per_s": round(simpy_rate),
        f"{label}_ratio_vs_simpy": round(rate / simpy_rate, 3),
    }


def run_bench(quick: bool = False) -> dict[str, Any]:
    """Measure and return the fabric figures (``quick`` shrinks the workloads for smoke tests)."""
    bursts = max(1, ALLTOALL_BURSTS // QUICK_DIVISOR) if quick else ALLTOALL_BURSTS
    rounds = max(1, RING_ROUNDS // QUICK_DIVISOR) if quick else RING_ROUNDS
    repeats = 1 if quick else 3
    figures: dict[str, Any] = {}
    figures.update(
        _pair(
            f"alltoall_{ALLTOALL_RANKS}",
            best_of(lambda: timetravel_messages(ALLTOALL, ALLTOALL_RANKS, bursts), repeats),
            best_of(lambda: simpy_messages("alltoall", ALLTOALL_RANKS, bursts), repeats),
        )
    )
    figures.update(
        _pair(
            f"ring_{RING_RANKS}",
            best_of(lambda: timetravel_messages(RING, RING_RANKS, rounds), repeats),
            best_of(lambda: simpy_messages("ring", RING_RANKS, rounds), repeats),
        )
    )
    return {"bench": "fabric", "figures": figures}
