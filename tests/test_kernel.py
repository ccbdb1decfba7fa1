"""The kernel's contract: exact virtual times, (t, seq) order, seeking, failures, isolation of nodes."""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Any

import numpy as np
import pytest
import xxhash
from one_node import run_one_node

from timetravel.scenarios import get_scenario
from timetravel.sim import Context, Event, Param, Scenario, Simulation, World, chain_head, kernel
from timetravel.sim.world import LOG_ENTRIES_MAX


def pingpong_world(**settings: Any) -> tuple[Scenario, World]:
    scenario = get_scenario("pingpong")
    config = scenario.resolve_config(settings)
    return scenario, scenario.build(config, 1)


def test_pingpong_without_jitter_ends_at_the_exact_virtual_time() -> None:
    scenario, world = pingpong_world(rounds=10, latency=1_000, jitter=0)
    result = Simulation(scenario, world).run()
    assert result.outcome == "pass" and result.stop == "drained"
    assert result.t_end_ns == 10 * 2 * 1_000
    assert result.events == 1 + 2 * 10
    assert world.nodes["pong"]["replies"] == 10


def record_order(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["seen"].append([ctx.now, event.seq, event.payload])


def order_scenario(events: list[tuple[int, str]]) -> tuple[Scenario, World]:
    def build(config: dict[str, Any], seed: int) -> World:
        world = World("order", config, seed)
        world.add_node("a", "recorder", {"seen": []})
        world.add_node("b", "recorder", {"seen": []})
        for t_ns, label in events:
            world.schedule(t_ns, "a", "note", label)
        return world

    scenario = Scenario("order", "", (), build, {"recorder": {"note": record_order}})
    return scenario, build({}, 0)


def test_events_at_equal_times_run_in_scheduling_order() -> None:
    scenario, world = order_scenario([(5, "late"), (1, "first"), (5, "later"), (1, "second")])
    Simulation(scenario, world).run()
    assert world.nodes["a"]["seen"] == [[1, 1, "first"], [1, 3, "second"], [5, 0, "late"], [5, 2, "later"]]


def test_until_runs_every_event_at_or_before_t_and_sets_the_clock() -> None:
    scenario, world = order_scenario([(10, "x"), (20, "y"), (30, "z")])
    result = Simulation(scenario, world).run(until_ns=20)
    assert result.stop == "until"
    assert [entry[2] for entry in world.nodes["a"]["seen"]] == ["x", "y"]
    assert world.t_ns == 20 and len(world.queue) == 1


def test_a_run_in_pieces_equals_a_straight_run_bit_for_bit() -> None:
    scenario = get_scenario("gossip")
    config = scenario.resolve_config({"nodes": 32, "rumors": 20})
    straight = scenario.build(config, 3)
    Simulation(scenario, straight, chain_batch_events=64).run()
    pieces = scenario.build(config, 3)
    simulation = Simulation(scenario, pieces, chain_batch_events=64)
    for until_ns in (1_000_000, 7_500_000, 7_500_000, 12_345_678):
        simulation.run(until_ns=until_ns)
    simulation.run(max_events=1)
    simulation.run(max_events=500)
    simulation.run()
    assert pieces.events_processed == straight.events_processed
    assert chain_head(pieces) == chain_head(straight)
    assert pieces.state_hash() == straight.state_hash()


def test_pause_hook_fires_at_every_multiple_of_the_interval() -> None:
    scenario, world = pingpong_world(rounds=50)
    pauses: list[int] = []
    Simulation(scenario, world).run(
        pause_every_events=16, on_pause=lambda sim: pauses.append(sim.world.events_processed)
    )
    assert pauses == [16, 32, 48, 64, 80, 96]
    assert world.events_processed == 101


def test_max_events_stops_after_that_many_more_events() -> None:
    scenario, world = pingpong_world(rounds=50)
    simulation = Simulation(scenario, world)
    assert simulation.run(max_events=7).events == 7
    result = simulation.run(max_events=3)
    assert result.events == 10 and result.stop == "max_events"


def test_world_round_trips_through_plain_data_and_runs_on_identically() -> None:
    scenario = get_scenario("gossip")
    config = scenario.resolve_config({"nodes": 16, "rumors": 10})
    world = scenario.build(config, 5)
    Simulation(scenario, world, chain_batch_events=50).run(max_events=300)
    copied = World.from_data(copy.deepcopy(world.to_data()))
    assert copied.state_hash() == world.state_hash()
    Simulation(scenario, world, chain_batch_events=50).run()
    Simulation(scenario, copied, chain_batch_events=50).run()
    assert chain_head(copied) == chain_head(world)
    assert copied.state_hash() == world.state_hash()


def test_state_hash_sees_node_state_and_effects_hash_ignores_branch_inputs() -> None:
    _, world = pingpong_world()
    before, effects_before = world.state_hash(), world.effects_hash()
    world.faults.append({"id": "f1", "kind": "drop"})
    world.config = {**world.config, "rtt_max": 5}
    world.branch_key = 9
    assert world.state_hash() != before
    assert world.effects_hash() == effects_before
    world.nodes["pong"]["replies"] = 1
    assert world.effects_hash() != effects_before


def explode(state: dict[str, Any], event: Event, ctx: Context) -> None:
    raise ZeroDivisionError("rank 12 divided by zero")


def test_a_handler_exception_is_a_failure_with_a_rank_free_signature() -> None:
    def build(config: dict[str, Any], seed: int) -> World:
        world = World("boom", config, seed)
        world.add_node("rank12", "worker")
        world.schedule(42, "rank12", "step")
        return world

    scenario = Scenario("boom", "", (), build, {"worker": {"step": explode}})
    result = Simulation(scenario, build({}, 0)).run()
    assert result.outcome == "fail" and result.stop == "failure"
    failure = result.failure
    assert failure is not None
    assert failure["kind"] == "exception" and failure["node"] == "rank12" and failure["t_ns"] == 42
    assert failure["signature"] == "exception:worker.step:ZeroDivisionError"
    assert "divided by zero" in failure["message"] and "test_kernel.py" in failure["message"]


def test_an_event_without_a_handler_is_an_unhandled_failure() -> None:
    scenario, world = order_scenario([(1, "x")])
    world.schedule(2, "b", "mystery")
    result = Simulation(scenario, world).run()
    assert result.failure is not None
    assert (
        result.failure["kind"] == "unhandled" and result.failure["signature"] == "unhandled:recorder.mystery"
    )


def test_fail_signatures_hold_no_rank_numbers() -> None:
    def go(state: dict[str, Any], event: Event, ctx: Context) -> None:
        ctx.fail("divergence", "rank7 differs", site="check.rank7")

    _world, result = run_one_node("f", go, t_ns=1, node="rank7", kind="worker")
    assert result.failure is not None and result.failure["signature"] == "divergence:check.rankN"


def test_sent_arrays_are_copied_and_frozen() -> None:
    def build(config: dict[str, Any], seed: int) -> World:
        world = World("iso", config, seed)
        world.add_node("sender", "sender", {"buffer": np.zeros(4, dtype=np.float32)})
        world.add_node("receiver", "receiver", {"got": None, "writable": None})
        world.schedule(0, "sender", "go")
        return world

    def go(state: dict[str, Any], event: Event, ctx: Context) -> None:
        ctx.send("receiver", "data", {"array": state["buffer"], "items": [1, 2]}, 16)
        state["buffer"][:] = 7.0

    def data(state: dict[str, Any], event: Event, ctx: Context) -> None:
        state["got"] = event.payload["array"].copy()
        state["writable"] = bool(event.payload["array"].flags.writeable)

    scenario = Scenario("iso", "", (), build, {"sender": {"go": go}, "receiver": {"data": data}})
    world = build({}, 0)
    assert Simulation(scenario, world).run().outcome == "pass"
    assert world.nodes["receiver"]["got"].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert world.nodes["receiver"]["writable"] is False


def test_events_to_a_down_node_are_dropped_but_fault_events_arrive() -> None:
    scenario, world = order_scenario([(1, "x"), (2, "y")])
    world.down["a"] = 0
    scenario = Scenario(
        scenario.name, "", (), scenario.build, {"recorder": {"note": record_order, "fault": record_order}}
    )
    world.schedule(3, "a", "fault", "restart")
    Simulation(scenario, world).run()
    assert world.nodes["a"]["seen"] == [[3, 2, "restart"]]
    assert world.events_processed == 3


def test_float_timer_delay_is_a_failure_not_a_silent_rounding() -> None:
    def go(state: dict[str, Any], event: Event, ctx: Context) -> None:
        ctx.timer(1.5, "later")  # type: ignore[arg-type]

    _world, result = run_one_node("t", go)
    assert result.failure is not None and "non-negative int" in result.failure["message"]


def test_metrics_and_log_are_world_data_and_the_log_is_bounded() -> None:
    def go(state: dict[str, Any], event: Event, ctx: Context) -> None:
        ctx.metric("loss", 0.5)
        for index in range(LOG_ENTRIES_MAX + 10):
            ctx.log(f"line {index}")

    world, _result = run_one_node("m", go, t_ns=7)
    assert world.metrics == {"loss": [[7, "n", 0.5]]}
    assert len(world.log) <= LOG_ENTRIES_MAX
    assert world.log[-1] == [7, "n", f"line {LOG_ENTRIES_MAX + 9}"]
    assert world.log_dropped + len(world.log) == LOG_ENTRIES_MAX + 10


def test_on_end_runs_once_when_the_queue_drains() -> None:
    scenario = get_scenario("gossip")
    config = scenario.resolve_config({"nodes": 40, "fanout": 1, "rumors": 5, "coverage_min": 0.99})
    world = scenario.build(config, 0)
    result = Simulation(scenario, world).run()
    assert result.outcome == "fail"
    assert result.failure is not None and result.failure["signature"] == "assertion:gossip.coverage"


def test_param_schema_rejects_unknown_keys_and_bad_types() -> None:
    scenario = Scenario(
        "p",
        "",
        (Param("n", "int", 3, "count", minimum=1), Param("mode", "str", "a", "mode", choices=("a", "b"))),
        lambda config, seed: World("p", config, seed),
        {},
        presets={},
    )
    assert scenario.resolve_config(["n=5", "mode=b"]) == {"n": 5, "mode": "b"}
    from timetravel.sim import ConfigError

    for bad in (["x=1"], ["n=abc"], ["n=0"], ["mode=c"], ["n"]):
        with pytest.raises(ConfigError):
            scenario.resolve_config(bad)


def test_set_values_apply_after_the_preset_whatever_their_order() -> None:
    from timetravel.sim import ConfigError

    scenario = Scenario(
        "p",
        "",
        (Param("preset", "str", "none", "preset"), Param("n", "int", 3, "count"), Param("m", "int", 1, "m")),
        lambda config, seed: World("p", config, seed),
        {},
        presets={"big": {"n": 100, "m": 50}},
    )
    assert scenario.resolve_config(["n=5", "preset=big"]) == {"preset": "big", "n": 5, "m": 50}
    assert scenario.resolve_config({"preset": "big"}) == {"preset": "big", "n": 100, "m": 50}
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        scenario.resolve_config(["preset=huge"])


CYCLE_EVENTS = 2_000


class _Cyclic:
    """An object a handler leaves in a reference cycle (garbage only the collector can free)."""

    def __init__(self) -> None:
        self.me = self


def _cycle_scenario(refs: list[Any]) -> tuple[Scenario, World]:
    def make_cycle(state: dict[str, Any], event: Event, ctx: Context) -> None:
        cyclic = _Cyclic()
        refs.append(weakref.ref(cyclic))
        state["kept"].append([event.payload])

    def build(config: dict[str, Any], seed: int) -> World:
        world = World("cycles", config, seed)
        world.add_node("a", "maker", {"kept": []})
        for t_ns in range(CYCLE_EVENTS):
            world.schedule(t_ns, "a", "make", t_ns)
        return world

    scenario = Scenario("cycles", "", (), build, {"maker": {"make": make_cycle}})
    return scenario, build({}, 0)


def test_a_run_promotes_its_survivors_unscanned_and_cycles_are_still_freed(monkeypatch: Any) -> None:
    monkeypatch.setattr(kernel, "YOUNG_PROMOTED_MIN", 0)
    refs: list[Any] = []
    scenario, world = _cycle_scenario(refs)
    gc.collect()
    collected: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collected.append(info["generation"])

    gc.callbacks.append(note)
    try:
        Simulation(scenario, world).run()
    finally:
        gc.callbacks.remove(note)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert collected == []  # the run's thousands of young objects were not scanned on the way out
    last_kept = world.nodes["a"]["kept"][-1]
    assert any(item is last_kept for item in gc.get_objects(generation=2))
    assert len(refs) == CYCLE_EVENTS and any(ref() is not None for ref in refs)
    gc.collect()
    assert all(ref() is None for ref in refs)
    assert world.nodes["a"]["kept"] == [[t_ns] for t_ns in range(CYCLE_EVENTS)]


def test_a_run_leaves_objects_the_program_froze_frozen(monkeypatch: Any) -> None:
    monkeypatch.setattr(kernel, "YOUNG_PROMOTED_MIN", 0)
    scenario, world = _cycle_scenario([])
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        Simulation(scenario, world).run()
        assert gc.get_freeze_count() >= frozen > 0
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("size", [0, 1, 240, 241, 1024, 1_900_001])
def test_the_chain_digest_is_xxh3_of_the_previous_digest_followed_by_the_batch(size: int) -> None:
    """Hashed as a stream (no concatenated copy): the digest recordings store and readers check."""
    previous = bytes(range(16))
    packed = bytes(index * 7 % 251 for index in range(size))
    assert kernel.chain_digest_after(previous, packed) == xxhash.xxh3_128_digest(previous + packed)
