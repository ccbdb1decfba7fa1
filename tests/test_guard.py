"""The determinism guard: what handlers see, what they may not do, and what everyone else sees."""

from __future__ import annotations

import asyncio
import datetime
import gc
import inspect
import multiprocessing
import os
import random
import secrets
import socket
import subprocess
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from timetravel.sim import Context, Event, Param, Scenario, Simulation, World, guard
from timetravel.sim.guard import VIRTUAL_EPOCH_NS, DeterminismError, ModeError

HandlerFunction = Callable[[dict[str, Any], Event, Context], None]
FIRST_EVENT_NS = 1_234_567
"""The probe's one event: 1.234567 ms after the simulated epoch."""


def probe(handler: HandlerFunction, *, determinism: str = "virtualize", **scenario_fields: Any) -> Scenario:
    """A one-node scenario whose only event (at FIRST_EVENT_NS) runs ``handler``."""

    def build(config: dict[str, Any], seed: int) -> World:
        world = World("probe", config, seed)
        world.add_node("n0", "probe", {"seen": {}})
        world.schedule(FIRST_EVENT_NS, "n0", "go")
        return world

    return Scenario(
        name="probe",
        summary="runs one handler once",
        params=(Param("unused", "int", 0, "no meaning"),),
        build=build,
        handlers={"probe": {"go": handler}},
        determinism=determinism,
        **scenario_fields,
    )


def run_probe(scenario: Scenario, seed: int = 1, **simulation_options: Any) -> tuple[World, Any]:
    world = scenario.build(scenario.defaults(), seed)
    result = Simulation(scenario, world, **simulation_options).run()
    return world, result


# -- the clock ------------------------------------------------------------------------------------


def read_clocks(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["seen"] = {
        "time": time.time(),
        "time_ns": time.time_ns(),
        "monotonic_ns": time.monotonic_ns(),
        "perf_counter": time.perf_counter(),
        "localtime": list(time.localtime())[:6],
        "strftime": time.strftime("%Y-%m-%d %H:%M:%S"),
        "now": datetime.datetime.now().isoformat(),
        "utcnow": datetime.datetime.utcnow().isoformat(),
        "now_utc": datetime.datetime.now(datetime.UTC).isoformat(),
        "now_plus_2": datetime.datetime.now(datetime.timezone(datetime.timedelta(hours=2))).isoformat(),
        "today": datetime.date.today().isoformat(),
        "datetime_today": datetime.datetime.today().isoformat(),
        "fromtimestamp_0": datetime.datetime.fromtimestamp(0).isoformat(),
    }


def test_clocks_read_logical_time_from_the_documented_epoch() -> None:
    world, result = run_probe(probe(read_clocks))
    assert result.outcome == "pass"
    seen = world.nodes["n0"]["seen"]
    assert seen["time_ns"] == VIRTUAL_EPOCH_NS + FIRST_EVENT_NS == 946_684_800_001_234_567
    assert seen["time"] == (VIRTUAL_EPOCH_NS + FIRST_EVENT_NS) / 1e9
    assert seen["monotonic_ns"] == FIRST_EVENT_NS
    assert seen["perf_counter"] == FIRST_EVENT_NS / 1e9
    assert seen["localtime"] == [2000, 1, 1, 0, 0, 0]  # the simulated machine lives in UTC
    assert seen["strftime"] == "2000-01-01 00:00:00"
    assert seen["now"] == seen["utcnow"] == seen["datetime_today"] == "2000-01-01T00:00:00.001234"
    assert seen["now_utc"] == "2000-01-01T00:00:00.001234+00:00"
    assert seen["now_plus_2"] == "2000-01-01T02:00:00.001234+02:00"
    assert seen["today"] == "2000-01-01"
    assert seen["fromtimestamp_0"] == "1970-01-01T00:00:00"


# -- entropy --------------------------------------------------------------------------------------


def draw_entropy(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["seen"] = {
        "random": random.random(),
        "randint": random.randint(1, 6),
        "choice": random.choice(["a", "b", "c", "d"]),
        "urandom": os.urandom(4).hex(),
        "token": secrets.token_hex(4),
        "uuid4": str(uuid.uuid4()),
        "uuid1": str(uuid.uuid1()),
        "numpy": int(np.random.randint(0, 1_000_000)),
        "system_random": random.SystemRandom().random(),
        "unseeded_instance": random.Random().random(),
    }


GUARD_SITES = {
    guard.SITE_RANDOM,
    guard.SITE_URANDOM,
    guard.SITE_UUID1,
    guard.SITE_UUID4,
    guard.SITE_NUMPY,
    guard.SITE_RANDOM_SEED,
}


def test_random_values_depend_on_the_seed_only() -> None:
    scenario = probe(draw_entropy)
    random.seed(1)
    np.random.seed(1)
    first, _ = run_probe(scenario, seed=5)
    random.seed(2)
    np.random.seed(2)
    again, _ = run_probe(scenario, seed=5)
    other, _ = run_probe(scenario, seed=6)
    assert first.nodes["n0"]["seen"] == again.nodes["n0"]["seen"]
    assert first.state_hash() == again.state_hash()
    different = [
        key for key, value in first.nodes["n0"]["seen"].items() if other.nodes["n0"]["seen"][key] != value
    ]
    assert {"random", "urandom", "token", "uuid4", "numpy", "system_random"} <= set(different)


def test_random_values_are_recorded_choices_that_replay_and_shrink_to_zero() -> None:
    scenario = probe(draw_entropy)
    log: list[list[Any]] = []
    world, _ = run_probe(scenario, seed=5, choice_log=log)
    assert {site for _, site, _, _ in log} == GUARD_SITES
    assert all(node == "n0" for node, _, _, _ in log)
    replay_overrides = {(node, site, index): value for node, site, index, value in log}
    replayed, _ = run_probe(scenario, seed=99, overrides=replay_overrides)
    assert replayed.nodes["n0"]["seen"] == world.nodes["n0"]["seen"]
    canonical, _ = run_probe(scenario, seed=5, overrides={key: 0 for key in replay_overrides})
    seen = canonical.nodes["n0"]["seen"]
    assert seen["random"] == 0.0
    assert seen["randint"] == 1 and seen["choice"] == "a"
    assert seen["urandom"] == "00000000" and seen["token"] == "00000000"
    assert seen["uuid4"] == "00000000-0000-4000-8000-000000000000"
    assert seen["numpy"] == np.random.RandomState(0).randint(0, 1_000_000)


def test_global_generators_are_not_advanced_by_handlers() -> None:
    scenario = probe(draw_entropy)
    random.seed(7)
    np.random.seed(7)
    expected = (random.random(), float(np.random.rand()))
    random.seed(7)
    np.random.seed(7)
    run_probe(scenario)
    assert (random.random(), float(np.random.rand())) == expected


# -- what cannot be simulated ---------------------------------------------------------------------


def sleep_for_real() -> None:
    time.sleep(0)


def start_thread() -> None:
    threading.Thread(target=print).start()


def start_timer() -> None:
    threading.Timer(1.0, print).start()


def run_asyncio() -> None:
    coroutine = asyncio.sleep(0)
    try:
        asyncio.run(coroutine)
    finally:
        coroutine.close()


def new_event_loop() -> None:
    asyncio.new_event_loop()


def open_socket() -> None:
    socket.socket()


def resolve_name() -> None:
    socket.getaddrinfo("localhost", 80)


def run_subprocess() -> None:
    subprocess.run(["true"], check=False)


def run_shell() -> None:
    os.system("true")


def start_process() -> None:
    multiprocessing.get_context("spawn").Process(target=print).start()


UNSIMULATABLE: dict[Callable[[], None], tuple[str, str]] = {
    sleep_for_real: ("time.sleep", "time.sleep"),
    start_thread: ("threading.Thread.start", ".start()"),
    start_timer: ("threading.Thread.start", ".start()"),
    run_asyncio: ("asyncio.run", "asyncio.run("),
    new_event_loop: ("asyncio.new_event_loop", "new_event_loop()"),
    open_socket: ("socket.socket", "socket.socket()"),
    resolve_name: ("socket.getaddrinfo", "getaddrinfo"),
    run_subprocess: ("subprocess.Popen", "subprocess.run"),
    run_shell: ("os.system", "os.system"),
    start_process: ("multiprocessing.process.BaseProcess.start", ".start()"),
}
"""Each call, the name the error must give it, and text on the line the error must point at."""


def line_of(function: Callable[..., Any], needle: str) -> int:
    source, first = inspect.getsourcelines(function)
    return first + next(index for index, text in enumerate(source) if needle in text and "def " not in text)


@pytest.mark.parametrize("mode", ["virtualize", "forbid"])
@pytest.mark.parametrize("call", list(UNSIMULATABLE), ids=lambda call: call.__name__)
def test_calls_that_cannot_be_simulated_fail_the_run_naming_the_call_site(
    call: Callable[[], None], mode: str
) -> None:
    label, needle = UNSIMULATABLE[call]

    def handler(state: dict[str, Any], event: Event, ctx: Context) -> None:
        call()

    threads_before = threading.active_count()
    _, result = run_probe(probe(handler, determinism=mode))
    assert result.outcome == "fail"
    failure = result.failure
    assert failure is not None and failure["kind"] == "exception"
    assert failure["signature"] == "exception:probe.go:DeterminismError"
    where = f"{__file__}:{line_of(call, needle)} in {call.__name__}"
    expected = f"DeterminismError: {label} called at {where} while node n0 handled 'go' at t=1234567 ns"
    assert expected in failure["message"]
    assert threading.active_count() == threads_before


def read_clock_in_forbid_mode(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["seen"] = {"when": time.time()}


def test_forbid_mode_refuses_clock_and_entropy_reads_with_the_call_site() -> None:
    world, result = run_probe(probe(read_clock_in_forbid_mode, determinism="forbid"))
    source, first = inspect.getsourcelines(read_clock_in_forbid_mode)
    line = first + next(index for index, text in enumerate(source) if "time.time()" in text)
    assert result.failure is not None
    assert (
        f"DeterminismError: time.time called at {__file__}:{line} in read_clock_in_forbid_mode "
        "while node n0 handled 'go' at t=1234567 ns: read logical time from ctx.now"
    ) in result.failure["message"]
    assert world.nodes["n0"]["seen"] == {}


def test_forbid_mode_error_carries_its_facts() -> None:
    class FakeContext:
        node = "r3"
        now = 42
        event = Event(42, 0, "r3", "step", None)

    previous = guard.enter(FakeContext(), "forbid")
    try:
        with pytest.raises(DeterminismError) as caught:
            random.random()
    finally:
        guard.leave(previous)
    error = caught.value
    assert (error.call, error.node, error.event_kind, error.t_ns) == ("random.random", "r3", "step", 42)
    assert (error.filename, error.lineno, error.function) == (
        __file__,
        line_of(test_forbid_mode_error_carries_its_facts, "random.random()"),
        "test_forbid_mode_error_carries_its_facts",
    )


# -- modes ----------------------------------------------------------------------------------------


def test_the_mode_comes_from_the_simulation_then_the_scenario() -> None:
    scenario = probe(read_clock_in_forbid_mode, determinism="forbid")
    world = scenario.build(scenario.defaults(), 1)
    assert Simulation(scenario, world).determinism == "forbid"
    world, result = run_probe(scenario, determinism="off")
    assert result.outcome == "pass"
    assert world.nodes["n0"]["seen"]["when"] > 1_600_000_000  # the machine's clock: after 2020
    world, result = run_probe(scenario, determinism="virtualize")
    assert world.nodes["n0"]["seen"]["when"] == (VIRTUAL_EPOCH_NS + FIRST_EVENT_NS) / 1e9
    with pytest.raises(ModeError, match="unknown determinism mode 'strict'"):
        run_probe(scenario, determinism="strict")
    with pytest.raises(ModeError, match="virtualize, forbid, off"):
        probe(read_clocks, determinism="loose")


def test_run_command_takes_the_mode(capsys: pytest.CaptureFixture[str]) -> None:
    from timetravel.cli import main

    assert main(["run", "leaky", "--set", "leak=clock", "--determinism", "forbid"]) == 1
    output = capsys.readouterr().out
    assert "DeterminismError: time.time called at" in output and "leaky.py" in output
    assert "reproduce: timetravel run leaky --seed 0 --determinism forbid --set leak=clock" in output
    assert main(["run", "leaky", "--set", "leak=clock", "--json"]) == 0
    assert '"determinism": "virtualize"' in capsys.readouterr().out


# -- everyone else sees the real functions ------------------------------------------------------


def test_code_outside_handlers_sees_the_real_functions() -> None:
    run_probe(probe(draw_entropy))
    assert guard.installed()
    assert guard.active_context() is None
    assert time.time() > 1_600_000_000
    assert datetime.datetime.now().year >= 2024
    assert os.urandom(16) != os.urandom(16)
    assert uuid.uuid4().version == 4 and uuid.uuid4() != uuid.uuid4()
    random.seed(3)
    assert random.random() == random.Random(3).random()
    thread = threading.Thread(target=time.sleep, args=(0,))
    thread.start()
    thread.join()


def test_other_threads_see_the_real_functions_while_a_handler_runs() -> None:
    handler_running = threading.Event()
    observed = threading.Event()
    seen_by_thread: dict[str, Any] = {}

    def observer() -> None:
        handler_running.wait(10)
        random.seed(11)
        seen_by_thread["random"] = random.random()
        seen_by_thread["time"] = time.time()
        seen_by_thread["now_year"] = datetime.datetime.now().year
        seen_by_thread["urandom_differs"] = os.urandom(8) != os.urandom(8)
        helper = threading.Thread(target=time.sleep, args=(0.001,))
        helper.start()
        helper.join()
        seen_by_thread["thread_started"] = True
        observed.set()

    def handler(state: dict[str, Any], event: Event, ctx: Context) -> None:
        handler_running.set()
        state["seen"] = {"observed": observed.wait(10), "time": time.time()}

    thread = threading.Thread(target=observer)
    thread.start()
    world, result = run_probe(probe(handler))
    thread.join()
    assert result.outcome == "pass"
    assert world.nodes["n0"]["seen"] == {"observed": True, "time": (VIRTUAL_EPOCH_NS + FIRST_EVENT_NS) / 1e9}
    assert seen_by_thread["random"] == random.Random(11).random()
    assert seen_by_thread["time"] > 1_600_000_000 and seen_by_thread["now_year"] >= 2024
    assert seen_by_thread["urandom_differs"] and seen_by_thread["thread_started"]


def test_names_bound_before_the_guard_was_installed_are_rebound() -> None:
    module = types.ModuleType("guard_alias_probe")
    module.clock = guard.original("time.time")  # as `from time import time` done before installing
    module.entropy = guard.original("os.urandom")
    sys.modules[module.__name__] = module
    try:

        def handler(state: dict[str, Any], event: Event, ctx: Context) -> None:
            state["seen"] = {"clock": module.clock(), "entropy": module.entropy(2).hex()}

        log: list[list[Any]] = []
        world, _ = run_probe(probe(handler), choice_log=log)
    finally:
        del sys.modules[module.__name__]
    assert world.nodes["n0"]["seen"]["clock"] == (VIRTUAL_EPOCH_NS + FIRST_EVENT_NS) / 1e9
    assert [site for _, site, _, _ in log] == [guard.SITE_URANDOM]


# -- the guard is switched off on every way out ---------------------------------------------------


def test_the_guard_is_off_after_a_handler_exception_and_an_interrupt() -> None:
    def raises(state: dict[str, Any], event: Event, ctx: Context) -> None:
        raise ValueError("boom")

    _, result = run_probe(probe(raises))
    assert result.failure is not None and result.failure["kind"] == "exception"
    assert guard.active_context() is None

    def interrupted(state: dict[str, Any], event: Event, ctx: Context) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_probe(probe(interrupted))
    assert guard.active_context() is None
    assert time.time() > 1_600_000_000


def test_the_end_of_run_hook_is_guarded_and_then_released() -> None:
    seen: dict[str, Any] = {}

    def on_end(world: World, ctx: Context) -> None:
        seen["time_ns"] = time.time_ns()
        seen["random"] = random.random()

    scenario = probe(read_clocks, on_end=on_end)
    world, _ = run_probe(scenario)
    assert seen["time_ns"] == VIRTUAL_EPOCH_NS + world.t_ns
    assert world.choices == {guard.SITE_RANDOM: 1}  # end-of-run draws use the world-level streams
    assert guard.active_context() is None

    def failing_end(world: World, ctx: Context) -> None:
        raise RuntimeError("oracle crashed")

    crashed, _ = run_probe(probe(read_clocks, on_end=failing_end))
    assert crashed.failures[0]["kind"] == "exception"
    assert crashed.failures[0]["signature"].endswith(".end:RuntimeError")
    assert "oracle crashed" in crashed.failures[0]["message"]
    assert guard.active_context() is None


def test_observers_between_and_during_segments_see_the_real_functions() -> None:
    def tick(state: dict[str, Any], event: Event, ctx: Context) -> None:
        state["seen"] = {"count": state["seen"].get("count", 0) + 1}
        if state["seen"]["count"] < 5:
            ctx.timer(10, "go")

    observed: list[tuple[Any, float]] = []

    def on_batch(first: int, events: list[Event], digest: bytes) -> None:
        observed.append((guard.active_context(), time.time()))

    def on_pause(simulation: Simulation) -> None:
        observed.append((guard.active_context(), time.time()))

    scenario = probe(tick)
    world = scenario.build(scenario.defaults(), 1)
    simulation = Simulation(scenario, world, chain_batch_events=2, on_chain_batch=on_batch)
    simulation.run(pause_every_events=2, on_pause=on_pause)
    assert world.nodes["n0"]["seen"]["count"] == 5
    assert len(observed) == 4  # 2 batch flushes and 2 pauses in 5 events
    assert all(context is None and when > 1_600_000_000 for context, when in observed)


def test_patched_functions_keep_their_names_and_pickle_by_reference() -> None:
    import pickle

    guard.install()
    assert time.time.__name__ == "time" and time.time.__module__ == "time"
    assert pickle.loads(pickle.dumps(time.time)) is time.time
    assert pickle.loads(pickle.dumps(random.random)) is random.random
    assert guard.uncovered_labels() == []
    assert {"time.time", "datetime.datetime.now", "os.urandom", "uuid.uuid4", "numpy.random.rand"} <= set(
        guard.patched_labels()
    )


# -- interpreter hooks ----------------------------------------------------------------------------


class _GarbageCycle:
    """An object in a reference cycle whose finalizer reads the clock (only a collection frees it)."""

    def __init__(self, seen: list[float]) -> None:
        self.seen = seen
        self.me = self

    def __del__(self) -> None:
        self.seen.append(time.perf_counter())


def _collect_garbage(state: dict[str, Any], event: Event, ctx: Context) -> None:
    _GarbageCycle(state["seen"].setdefault("finalized", []))
    gc.collect()  # a library's own collection inside a handler; an automatic one behaves alike
    state["seen"]["guarded_after"] = guard.active_context() is ctx


@pytest.mark.parametrize("mode", ["virtualize", "forbid"])
def test_garbage_collector_callbacks_see_the_real_functions_and_never_fail_the_run(mode: str) -> None:
    readings: list[tuple[str, float, float]] = []

    def gc_callback(phase: str, info: dict[str, Any]) -> None:
        readings.append((phase, time.perf_counter(), random.random()))

    def on_end(world: World, ctx: Context) -> None:
        gc.collect()

    scenario = probe(_collect_garbage, determinism=mode, on_end=on_end)
    gc.callbacks.append(gc_callback)
    try:
        world, result = run_probe(scenario)
    finally:
        gc.callbacks.remove(gc_callback)
    assert result.failure is None, result.failure
    assert len(readings) >= 4  # start and stop of the handler's collection and of the end hook's
    real_now = time.perf_counter()
    assert all(0 < clock <= real_now and clock > FIRST_EVENT_NS / 1e9 for _, clock, _ in readings)
    finalized = world.nodes["n0"]["seen"].get("finalized", [])
    assert finalized and all(value > FIRST_EVENT_NS / 1e9 for value in finalized)  # the real clock
    assert world.choices == {}  # the callbacks' random draws took no choice
    assert guard.active_context() is None
    assert world.nodes["n0"]["seen"]["guarded_after"]  # the handler itself is guarded again


def test_the_guard_keeps_its_collection_callbacks_at_both_ends() -> None:
    def late_callback(phase: str, info: dict[str, Any]) -> None:
        late.append((phase, guard.active_context()))

    late: list[tuple[str, Any]] = []
    run_probe(probe(_collect_garbage))  # installs the guard's callbacks
    gc.callbacks.append(late_callback)  # registered after them: the next activation moves them
    try:
        run_probe(probe(_collect_garbage, determinism="forbid"))
    finally:
        gc.callbacks.remove(late_callback)
    assert late and all(context is None for _, context in late)
