"""GPU streams: FIFO per stream, events, open kernels, the completion-order choice, the race detector.

Every test runs on the Python stream engine and, when the compiled core is built, on its compiled
twin (fabric/_speedups_gpu*.h), which must behave alike in every case here, errors included."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fabric_probe import arrivals, probe_scenario, probe_world, run

from timetravel import fabric
from timetravel.fabric import gpu, gpu_streams, speedups
from timetravel.sim import Context, RunResult

Script = Callable[[dict[str, Any], Context], None]
ENGINES = ["python", "compiled"] if speedups.compiled is not None else ["python"]


@pytest.fixture(autouse=True, params=ENGINES)
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "python":
        monkeypatch.setattr(gpu, "_engine", None)
        monkeypatch.setattr(gpu_streams, "pump", gpu_streams.pump_python)
    yield request.param


def run_script(
    script: Script,
    *,
    seed: int = 1,
    overrides: dict[tuple[str, str, int], int] | None = None,
    choices: list[list[Any]] | None = None,
    extra_events: list[tuple[int, Script]] = (),  # type: ignore[assignment]
    **settings: Any,
) -> tuple[RunResult, list[list[Any]], dict[str, Any]]:
    """Run ``script`` as r0's handler at t=0 (and each extra script at its time); return r0's done events."""
    steps = {0: script, **dict(extra_events)}

    def go(state: dict[str, Any], ctx: Context) -> None:
        steps[ctx.now](state, ctx)

    scenario = probe_scenario(go=go)
    world = probe_world(scenario, seed, **settings)
    for t_ns in steps:
        world.schedule(t_ns, "r0", "go", [])
    result = run(scenario, world, overrides=overrides, choice_log=choices)
    return result, arrivals(world, "r0"), world.nodes["r0"]


def order_choices(choices: list[list[Any]]) -> list[int]:
    return [value for node, site, _, value in choices if site == "gpu.order"]


def test_kernels_on_one_stream_run_fifo() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "a", 100, done_kind="done", payload="a")
        fabric.launch(ctx, "s1", "b", 50, done_kind="done", payload="b")
        fabric.launch(ctx, "s1", "c", 0, done_kind="done", payload="c")

    result, done, state = run_script(script)
    assert result.outcome == "pass"
    assert done == [[100, "done", "a"], [150, "done", "b"], [150, "done", "c"]]
    assert fabric.idle(state)


def test_streams_overlap_and_the_nominal_order_is_choice_zero() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "long", 100, done_kind="done", payload="long")
        fabric.launch(ctx, "s2", "short", 50, done_kind="done", payload="short")

    choices: list[list[Any]] = []
    _, done, _ = run_script(script, overrides={("r0", "gpu.order", 0): 0}, choices=choices)
    assert done == [[50, "done", "short"], [100, "done", "long"]]
    assert order_choices(choices) == [0]


def test_a_flipped_choice_pushes_the_later_launched_kernel_past_the_other() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "long", 100, done_kind="done", payload="long")
        fabric.launch(ctx, "s2", "short", 50, done_kind="done", payload="short")

    _, done, _ = run_script(script, overrides={("r0", "gpu.order", 0): 1})
    assert done == [[100, "done", "long"], [101, "done", "short"]]


def test_a_flipped_choice_can_delay_the_kernel_already_running() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "first", 50, done_kind="done", payload="first")
        fabric.launch(ctx, "s2", "second", 100, done_kind="done", payload="second")
        fabric.launch(ctx, "s1", "after_first", 10, done_kind="done", payload="after_first")

    _, done, _ = run_script(script, overrides={("r0", "gpu.order", 0): 1})
    # "first" is rescheduled to 101; its stale completion at 50 is ignored; FIFO follows the new end.
    assert done == [[100, "done", "second"], [101, "done", "first"], [111, "done", "after_first"]]


def test_completion_order_varies_across_seeds_and_repeats_within_one() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "a", 100, done_kind="done", payload="a")
        fabric.launch(ctx, "s2", "b", 100, done_kind="done", payload="b")

    orders = set()
    for seed in range(16):
        first = [entry[2] for entry in run_script(script, seed=seed)[1]]
        assert [entry[2] for entry in run_script(script, seed=seed)[1]] == first
        orders.add(tuple(first))
    assert orders == {("a", "b"), ("b", "a")}


def test_record_and_wait_order_two_streams_without_drawing_an_order_choice() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "producer", 100, done_kind="done", payload="producer")
        fabric.record(ctx, "s1", "ready")
        fabric.wait(ctx, "s2", "ready")
        fabric.launch(ctx, "s2", "consumer", 10, done_kind="done", payload="consumer")

    choices: list[list[Any]] = []
    _, done, state = run_script(script, choices=choices)
    assert done == [[100, "done", "producer"], [110, "done", "consumer"]]
    assert order_choices(choices) == []
    assert fabric.event_done(state, "ready")


def test_wait_uses_the_record_that_was_latest_when_it_was_called() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "a", 100)
        fabric.record(ctx, "s1", "e")
        fabric.wait(ctx, "s2", "e")
        fabric.launch(ctx, "s1", "c", 200)
        fabric.record(ctx, "s1", "e")  # re-armed after the wait was queued: s2 does not wait for it
        fabric.launch(ctx, "s2", "b", 10, done_kind="done", payload="b")

    _, done, _ = run_script(script, overrides={("r0", "gpu.order", 0): 0})
    assert done == [[110, "done", "b"]]


def test_waiting_on_an_event_never_recorded_does_not_block() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.wait(ctx, "s1", "never")
        fabric.launch(ctx, "s1", "a", 10, done_kind="done", payload="a")

    assert run_script(script)[1] == [[10, "done", "a"]]


def test_an_open_kernel_runs_until_finish_and_holds_its_stream() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "comm", "allreduce", None, started_kind="started", done_kind="done", payload="ar")
        fabric.launch(ctx, "comm", "after", 5, done_kind="done", payload="after")
        assert fabric.running_kernel(state, "comm") == "allreduce"

    def later(state: dict[str, Any], ctx: Context) -> None:
        fabric.finish(ctx, "comm", "allreduce")

    result, done, _ = run_script(script, extra_events=[(700, later)])
    assert result.outcome == "pass"
    assert done == [[0, "started", "ar"], [700, "done", "ar"], [705, "done", "after"]]


def test_finishing_a_timed_kernel_is_a_bug_reported_as_an_exception() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "timed", 100)
        fabric.finish(ctx, "s1")

    result, _, _ = run_script(script)
    assert result.failure is not None and result.failure["kind"] == "exception"
    assert "runs no open kernel" in result.failure["message"]


def test_gpu_calls_on_a_node_without_a_gpu_say_how_to_fix_it() -> None:
    scenario = probe_scenario(go=lambda state, ctx: fabric.launch(ctx, "s1", "k", 1))
    world = probe_world(scenario)
    world.schedule(0, "ctl", "go", [])
    result = run(scenario, world)
    assert (
        result.failure is not None
        and "name it among the ranks passed to fabric.install" in result.failure["message"]
    )


def test_a_done_kind_without_a_handler_is_a_failure_naming_it() -> None:
    result, _, _ = run_script(lambda state, ctx: fabric.launch(ctx, "s1", "k", 1, done_kind="nobody"))
    assert result.failure is not None and result.failure["kind"] == "unhandled"
    assert "'nobody'" in result.failure["message"]


def test_bad_launch_arguments_are_refused() -> None:
    for duration in (-1, 1.5):
        result, _, _ = run_script(lambda state, ctx, d=duration: fabric.launch(ctx, "s1", "k", d))
        assert result.failure is not None and "non-negative int" in result.failure["message"]


# -- the race detector ----------------------------------------------------------------------------


def producer_consumer(with_wait: bool) -> Script:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "compute", "backward", 100, writes=["grad"], done_kind="done", payload="backward")
        fabric.record(ctx, "compute", "grad_ready")
        if with_wait:
            fabric.wait(ctx, "comm", "grad_ready")
        fabric.launch(
            ctx, "comm", "allreduce", 50, reads=["grad"], writes=["grad"], done_kind="done", payload="ar"
        )

    return script


def test_the_race_detector_catches_a_missing_wait_naming_both_kernels_and_the_buffer() -> None:
    result, _, _ = run_script(producer_consumer(with_wait=False))
    failure = result.failure
    assert failure is not None and failure["kind"] == "race"
    assert failure["signature"] == "race:gpu.race.grad" and failure["node"] == "r0" and failure["t_ns"] == 0
    assert "'allreduce' on stream 'comm' reads it" in failure["message"]
    assert "kernel 'backward' on stream 'compute' wrote it" in failure["message"]


def test_the_race_detector_is_silent_with_the_wait() -> None:
    result, done, _ = run_script(producer_consumer(with_wait=True))
    assert result.outcome == "pass"
    assert done == [[100, "done", "backward"], [150, "done", "ar"]]


def test_the_race_is_caught_on_every_seed_because_timing_plays_no_part() -> None:
    for seed in range(10):
        result, _, _ = run_script(producer_consumer(with_wait=False), seed=seed)
        assert result.failure is not None and result.failure["kind"] == "race"


def test_with_the_detector_off_the_race_runs_to_its_symptom() -> None:
    result, done, _ = run_script(
        producer_consumer(with_wait=False), race_detector=False, overrides={("r0", "gpu.order", 0): 0}
    )
    assert result.outcome == "pass"
    assert done == [[50, "done", "ar"], [100, "done", "backward"]]  # the allreduce used the old gradient


def test_write_after_read_without_an_edge_is_a_race() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "reader", 10, reads=["w"])
        fabric.launch(ctx, "s2", "writer", 10, writes=["w"])

    failure = run_script(script)[0].failure
    assert failure is not None and "'writer' on stream 's2' writes it" in failure["message"]
    assert "'reader' on stream 's1' read it" in failure["message"]


def test_write_after_write_without_an_edge_is_a_race_but_reads_may_share() -> None:
    def writers(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "w1", 10, writes=["b"])
        fabric.launch(ctx, "s2", "w2", 10, writes=["b"])

    def readers(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "r1", 10, reads=["b"])
        fabric.launch(ctx, "s2", "r2", 10, reads=["b"])

    failure = run_script(writers)[0].failure
    assert failure is not None and "'w2' on stream 's2' writes it" in failure["message"]
    assert run_script(readers)[0].outcome == "pass"


def test_host_synchronization_on_a_completion_is_an_ordering_edge() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "producer", 100, writes=["b"], done_kind="done", payload="producer")

    def after_done(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s2", "consumer", 10, reads=["b"], done_kind="done", payload="consumer")

    result, done, _ = run_script(script, extra_events=[(200, after_done)])
    assert result.outcome == "pass" and [entry[2] for entry in done] == ["producer", "consumer"]


def test_a_completion_the_host_never_heard_of_is_not_an_edge() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "producer", 100, writes=["b"])  # no done_kind: the host never syncs

    def later(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s2", "consumer", 10, reads=["b"])

    failure = run_script(script, extra_events=[(200, later)])[0].failure
    assert failure is not None and failure["kind"] == "race"


def test_vector_clocks_are_per_rank_and_small() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "a", "k1", 10, writes=["x"])
        fabric.record(ctx, "a", "e")
        fabric.wait(ctx, "b", "e")
        fabric.launch(ctx, "b", "k2", 10, writes=["x"])

    _, _, state = run_script(script)
    streams = state["gpu"]["streams"]
    assert streams["a"]["clock"] == [1] and streams["b"]["clock"] == [1, 1]
    assert state["gpu"]["access"]["x"]["write"] == [1, 1, "k2"]


@pytest.mark.parametrize("race_detector", [True, False])
def test_gpu_state_is_plain_data(race_detector: bool) -> None:
    from timetravel.sim import check_plain

    _, _, state = run_script(producer_consumer(with_wait=True), race_detector=race_detector)
    check_plain(state["gpu"])


def test_schedule_finishes_ends_each_open_kernel_in_turn_and_tells_the_nodes_running_none() -> None:
    """A collective-level all-reduce ends every member's open kernel at once (collective_level.py).
    Each member's completion and each miss (no GPU, no such stream, another kernel) is delivered
    in the list's order: at one time, the run processes them in that order. r1's state is a dict
    subclass, which the compiled engine hands to Python's schedule_finish in its turn."""
    seen: list[list[Any]] = []

    def on_go(state: dict[str, Any], event: Any, ctx: Context) -> None:
        if ctx.node == "ctl":
            nodes = ["r1", "ctl", "r0", "r2", "r3"]
            fabric.schedule_finishes(ctx, nodes, "comm", "allreduce", [300] * len(nodes), "missed", "k")
        elif ctx.node == "r2":
            fabric.launch(ctx, "comm", "other", None, done_kind="done", payload="r2")
        elif ctx.node != "r3":
            fabric.launch(ctx, "comm", "allreduce", None, done_kind="done", payload=ctx.node)

    def on_seen(state: dict[str, Any], event: Any, ctx: Context) -> None:
        seen.append([ctx.now, ctx.node, event.kind, event.payload])

    table = {"go": on_go, "done": on_seen, "missed": on_seen}
    scenario = dataclasses.replace(
        probe_scenario(), handlers=fabric.with_handlers({"rank": table, "control": table})
    )
    world = probe_world(scenario, ranks=4)
    world.nodes["r1"] = type("StateSubclass", (dict,), {})(world.nodes["r1"])
    for node, t_ns in [("r0", 0), ("r1", 0), ("r2", 0), ("ctl", 100)]:
        world.schedule(t_ns, node, "go", [])
    assert run(scenario, world).outcome == "pass"
    assert seen == [
        [300, "r1", "done", "r1"],
        [300, "ctl", "missed", "k"],
        [300, "r0", "done", "r0"],
        [300, "r2", "missed", "k"],
        [300, "r3", "missed", "k"],
    ]
    assert fabric.running_kernel(world.nodes["r2"], "comm") == "other"


def test_schedule_finishes_refuses_times_that_do_not_match_the_nodes() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        with pytest.raises(ValueError, match="2 nodes but 1 completion times"):
            fabric.schedule_finishes(ctx, ["r0", "r1"], "comm", "allreduce", [5], "missed", None)

    result, _, _ = run_script(script)
    assert result.outcome == "pass"
