"""``fabric.launch``, ``fabric.record``, ``fabric.wait`` and the ``gpu.done`` handler are the compiled
core's entries when it is built (fabric/_speedups_entry.h): C callables that bind their arguments as the
Python functions do and run what those run. Calls with keywords in any order, a keyword string that
is not the interned one, defaults, an engine that is neither the compiled core nor None, and calls
Python refuses must all behave as the Python functions (fabric/gpu.py ``_PYTHON_ENTRIES``) do."""

from __future__ import annotations

import functools
import math
from collections import Counter
from typing import Any

import pytest
from fabric_probe import arrivals, probe_scenario, probe_world, run

from timetravel import fabric
from timetravel.fabric import gpu, gpu_streams, race, speedups
from timetravel.fabric.install import with_handlers
from timetravel.sim import Context, Simulation

pytestmark = pytest.mark.skipif(speedups.compiled is None, reason="fabric's compiled code is not built")

DONE_KIND_KEYWORD = "".join(["done", "_kind"])
"""``"done_kind"`` built at run time: a keyword equal to the interned one but another object."""


def _script(state: dict[str, Any], ctx: Context) -> None:
    """Every way a scenario may call the three functions."""
    fabric.launch(ctx, "s1", "a", 100, (), ("x",), "done", "a")
    fabric.launch(ctx, stream="s1", name="b", duration_ns=40, done_kind="done", payload="b")
    fabric.launch(ctx, "s2", "c", 30, payload="c", writes=["y"], done_kind="done", reads=("z",))
    fabric.record(ctx, "s1", "ready")
    fabric.wait(ctx=ctx, event="ready", stream="s2")
    fabric.launch(ctx, "s2", "d", 5, **{DONE_KIND_KEYWORD: "done", "payload": "d"})
    fabric.launch(ctx, "s3", "open", None, started_kind="started", payload="open")
    fabric.record(ctx, stream="s2", event="after")
    fabric.launch(ctx, "s1", "silent", 7)


def _run(engine: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    monkeypatch.setattr(gpu, "_engine", engine)
    scenario = probe_scenario(go=_script)
    world = probe_world(scenario, 1)
    world.schedule(0, "r0", "go", [])
    result = run(scenario, world)
    return result.outcome, result.events, str(world.state_hash()), arrivals(world, "r0")


class CountingEngine:
    """An engine that is neither the compiled core nor None: the Python functions call it."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        function = getattr(speedups.compiled, name)

        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            return function(*args)

        return counted


def test_fabric_exports_the_compiled_entries() -> None:
    assert speedups.compiled is not None
    assert fabric.launch is speedups.compiled.launch
    assert fabric.record is speedups.compiled.record
    assert fabric.wait is speedups.compiled.wait
    handler = with_handlers({"rank": {}})["rank"][gpu.DONE_KIND]
    assert isinstance(handler, functools.partial)
    assert handler.func is speedups.compiled.gpu_done_entry


def test_entries_bind_arguments_as_python_does_on_every_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = _run(speedups.compiled, monkeypatch)
    python = _run(None, monkeypatch)
    counting = CountingEngine()
    through_python = _run(counting, monkeypatch)
    assert compiled == python == through_python
    assert compiled[0] == "pass"
    assert [entry[2] for entry in compiled[3] if entry[1] == "done"] == ["c", "a", "b", "d"]
    assert [entry[1] for entry in compiled[3]].count("started") == 1
    assert counting.calls["gpu_launch"] == 6
    assert counting.calls["gpu_record"] == 2
    assert counting.calls["gpu_wait"] == 1
    assert counting.calls["gpu_done"] >= 5


class Plain:
    now = 0
    node = "r0"


@pytest.mark.parametrize(
    ("which", "args", "kwargs"),
    [
        (0, (Plain(), "s1"), {}),
        (0, (Plain(), "s1", "a", 1), {"stream": "s2"}),
        (0, (Plain(), "s1", "a", 1), {"colour": "red"}),
        (0, (Plain(), "s1", "a", 1, (), (), None, None, None, "extra"), {}),
        (1, (Plain(), "s1"), {}),
        (2, (Plain(), "s1", "e"), {"event": "e"}),
    ],
)
def test_a_call_python_refuses_raises_pythons_type_error(
    which: int, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    entries = (fabric.launch, fabric.record, fabric.wait)
    with pytest.raises(TypeError) as python:
        gpu._PYTHON_ENTRIES[which](*args, **kwargs)
    with pytest.raises(TypeError) as compiled:
        entries[which](*args, **kwargs)
    assert str(compiled.value) == str(python.value)


def test_a_bad_duration_raises_pythons_value_error() -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "a", -5)

    scenario = probe_scenario(go=script)
    world = probe_world(scenario, 1)
    world.schedule(0, "r0", "go", [])
    result = run(scenario, world)
    assert result.outcome == "fail"
    assert "duration must be a non-negative int of ns or None, got -5" in world.failures[0]["message"]


def test_the_done_entry_hands_a_payload_it_does_not_know_to_the_python_handler() -> None:
    seen: list[Any] = []

    def python_handler(state: dict[str, Any], event: Any, ctx: Any) -> None:
        seen.append(event)

    assert speedups.compiled is not None
    state: dict[str, Any] = {}
    result = speedups.compiled.gpu_done_entry({}, python_handler, state, ("not", "an", "event"), Plain())
    assert result is None
    assert seen == [("not", "an", "event")]
    with pytest.raises(TypeError, match="5 arguments"):
        speedups.compiled.gpu_done_entry({}, python_handler, state)


class Name(str):
    """A str subclass: Python's checks accept it, the compiled creation leaves it to Python."""


def _first_uses(state: dict[str, Any], ctx: Context) -> None:
    fabric.launch(ctx, "s1", "a", 10)
    fabric.record(ctx, "s1", "e1")
    fabric.wait(ctx, Name("s2"), "e1")
    fabric.record(ctx, Name("s2"), ("a", "tuple", "event"))
    fabric.launch(ctx, "s3", "b", None)


def _gpu_after(script: Any, monkeypatch: pytest.MonkeyPatch, engine: Any) -> tuple[Any, ...]:
    monkeypatch.setattr(gpu, "_engine", engine)
    scenario = probe_scenario(go=script)
    world = probe_world(scenario, 1)
    world.schedule(0, "r0", "go", [])
    result = run(scenario, world)
    state = world.nodes["r0"]["gpu"]
    layout = {
        "streams": [(name, list(stream.items())) for name, stream in state["streams"].items()],
        "events": [(name, list(entry.items())) for name, entry in state["events"].items()],
    }
    failures = [failure["message"] for failure in world.failures]
    return result.outcome, layout, failures, str(world.state_hash())


def test_a_first_use_creates_the_stream_and_event_python_creates(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = _gpu_after(_first_uses, monkeypatch, speedups.compiled)
    assert compiled == _gpu_after(_first_uses, monkeypatch, None)
    outcome, layout, _, _ = compiled
    assert outcome == "pass"
    assert [name for name, _ in layout["streams"]] == ["s1", "s2", "s3"]
    assert layout["streams"][2][1] == [
        ("index", 2),
        ("queue", []),
        ("running", layout["streams"][2][1][2][1]),
        ("clock", [0, 0, 1]),
    ]
    assert layout["events"][0] == (
        "e1",
        [("recorded", 1), ("completed", 1), ("pending", []), ("clock", [1]), ("t_ns", 10)],
    )


@pytest.mark.parametrize(
    ("stream", "message"),
    [("", "a stream name is a non-empty str, got ''"), (7, "a stream name is a non-empty str, got 7")],
)
def test_a_bad_stream_name_fails_alike_on_both_engines(
    stream: Any, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, stream, "a", 10)

    compiled = _gpu_after(script, monkeypatch, speedups.compiled)
    assert compiled == _gpu_after(script, monkeypatch, None)
    assert compiled[0] == "fail" and message in compiled[2][0]


def test_too_many_streams_and_events_fail_alike_on_both_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    def streams(state: dict[str, Any], ctx: Context) -> None:
        for index in range(gpu.STREAMS_MAX + 1):
            fabric.record(ctx, f"s{index}", "e")

    def events(state: dict[str, Any], ctx: Context) -> None:
        for index in range(4):
            fabric.record(ctx, "s", f"e{index}")

    compiled = _gpu_after(streams, monkeypatch, speedups.compiled)
    assert compiled == _gpu_after(streams, monkeypatch, None)
    assert f"a GPU has at most {gpu.STREAMS_MAX} streams" in compiled[2][0]
    monkeypatch.setattr(gpu_streams, "GPU_EVENTS_MAX", 3)
    gpu._compiled_entries()  # hands the compiled core the smaller bound
    try:
        compiled = _gpu_after(events, monkeypatch, speedups.compiled)
        assert compiled == _gpu_after(events, monkeypatch, None)
        assert "a GPU holds at most 3 named events" in compiled[2][0]
        assert len(compiled[1]["events"]) == 3
    finally:
        monkeypatch.undo()
        gpu._compiled_entries()


def test_the_compiled_engine_creates_exact_str_streams_and_events_without_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: Counter[str] = Counter()

    def counted(name: str, function: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            calls[name] += 1
            return function(*args)

        return wrapper

    def configure(new_stream: Any, event_entry: Any) -> None:
        speedups.compiled.configure_gpu(  # type: ignore[union-attr]
            gpu_streams.pump_python,
            gpu_streams.draw_completion_order,
            race._report,
            math.ceil,
            gpu.DONE_KIND,
            race.TRACKED_BUFFERS_MAX,
            gpu_streams.report_unhandled,
            gpu_streams.STREAM_OPS_MAX,
            new_stream,
            event_entry,
        )

    configure(counted("stream", gpu_streams.stream_of), counted("event", gpu_streams.event_entry))
    try:
        outcome = _gpu_after(_first_uses, monkeypatch, speedups.compiled)[0]
    finally:
        configure(gpu_streams.stream_of, gpu_streams.event_entry)
    assert outcome == "pass"
    assert calls == {"stream": 1}  # the str subclass only


def _ordered(value: Any) -> Any:
    """A dict as the list of its items, recursively: equal only with the same keys in one order."""
    if isinstance(value, dict):
        return [(key, _ordered(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value


def test_running_kernels_and_queued_ops_have_pythons_keys_in_pythons_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compiled engine builds these dicts from templates (fabric/_speedups_gpu_host.h): a snapshot
    encodes a dict in its order, so the order is part of the bits."""

    def script(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s1", "a", 100, reads=("x",), done_kind="done", payload=[1])
        fabric.launch(ctx, "s1", "b", 50, writes=("x",), done_kind="done", payload=[2])
        fabric.record(ctx, "s1", "e")
        fabric.wait(ctx, "s2", "e")
        fabric.launch(ctx, "s2", "open", None, started_kind="started")

    layouts = []
    for engine in (speedups.compiled, None):
        monkeypatch.setattr(gpu, "_engine", engine)
        scenario = probe_scenario(go=script)
        world = probe_world(scenario, 1)
        world.schedule(0, "r0", "go", [])
        Simulation(scenario, world).run(max_events=1)
        layouts.append(_ordered(world.nodes["r0"]["gpu"]))
    assert layouts[0] == layouts[1]
    streams = dict(dict(layouts[0])["streams"])
    running = ["name", "ticket", "start_ns", "end_ns", "done_kind", "payload"]
    assert [key for key, _ in dict(streams["s1"])["running"]] == running
    queue = dict(streams["s1"])["queue"]
    assert [[key for key, _ in op] for op in queue] == [
        [
            "op",
            "name",
            "duration_ns",
            "reads",
            "writes",
            "done_kind",
            "payload",
            "started_kind",
            "host_clock",
        ],
        ["op", "event", "generation"],
    ]


class LoggingContext(Context):
    """A Context that overrides ``deliver``: the engine must call the override, not the core's."""

    __slots__ = ("delivered",)

    def deliver(self, t_ns: int, dst: str, kind: str, payload: Any = None) -> None:
        self.delivered.append([t_ns, dst, kind])
        super().deliver(t_ns, dst, kind, payload)


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_the_engine_delivers_through_a_contexts_own_deliver(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu, "_engine", speedups.compiled if engine == "compiled" else None)
    world = probe_world(probe_scenario(), 1)
    plain, logging = Context(world), LoggingContext(world)
    logging.delivered = []
    for node, ctx in (("r0", plain), ("r1", logging)):
        ctx.node = node
        ctx.state = world.nodes[node]
        fabric.launch(ctx, "s1", "a", 10, done_kind="done")
    assert logging.delivered == [[10, "r1", gpu.DONE_KIND]]
    assert sorted(event[2:4] for event in world.queue) == [("r0", gpu.DONE_KIND), ("r1", gpu.DONE_KIND)]
