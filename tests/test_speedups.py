"""The compiled core (timetravel/sim/_speedups.c) gives the same bits as the pure-Python kernel.

The pure-Python kernel is the reference and the fallback when no C compiler built the core. So are
the layers above with C of their own (fabric, snapshot, recording: each layer's speedups.py loads
its extension); ``TIMETRAVEL_PURE_PYTHON=1`` switches all of them off. Both
run ``tests/speedups_cases.py`` (whole and partial runs of every built-in scenario, seeks, pauses,
small chain batches, every kind of choice, overrides and the choice log, keywords, every error a
handler can make) in their own process, and the outputs must be equal: choice values, hash chain,
state hash, the queue list's layout, failures and their messages.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from timetravel.fabric import speedups as fabric_speedups
from timetravel.recording import speedups as recording_speedups
from timetravel.sim import Context, Event, World, speedups
from timetravel.snapshot import speedups as snapshot_speedups

TESTS = Path(__file__).resolve().parent
CASES = TESTS / "speedups_cases.py"
LAYER_SPEEDUPS = {
    "sim": speedups,
    "fabric": fabric_speedups,
    "snapshot": snapshot_speedups,
    "recording": recording_speedups,
}
"""Each layer with optional C of its own, and the module that loads it."""


def run_cases(pure_python: bool) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if key != speedups.PURE_PYTHON_ENV}
    if pure_python:
        env[speedups.PURE_PYTHON_ENV] = "1"
    env["PYTHONPATH"] = str(TESTS.parent) + os.pathsep + env.get("PYTHONPATH", "")
    completed = subprocess.run(
        [sys.executable, str(CASES)], capture_output=True, text=True, env=env, timeout=600, check=True
    )
    output: dict[str, Any] = json.loads(completed.stdout)
    return output


def test_compiled_core_and_pure_python_kernel_give_identical_results() -> None:
    compiled, pure = run_cases(pure_python=False), run_cases(pure_python=True)
    assert pure["implementation"] == "python"
    assert compiled["implementation"] == speedups.kernel_implementation()
    assert sorted(compiled["results"]) == sorted(pure["results"])
    differing = [name for name in pure["results"] if compiled["results"][name] != pure["results"][name]]
    assert differing == []
    results = pure["results"]
    assert results["bad:negative_timer"]["failures"][0]["message"].startswith(
        "ValueError: timer delay must be a non-negative int"
    )
    assert results["bad:unhandled"]["failures"][0]["kind"] == "unhandled"
    assert "event for unknown node 'ghost'" in results["bad:unknown_node"]["failures"][0]["message"]
    assert results["needle:0:until"]["pauses"] and results["needle:0:until"]["digests"]
    assert len(results["draws:overrides"]["log"]) > 100


def test_ctx_deliver_and_timer_keep_heapqs_layout_of_the_queue() -> None:
    """Handlers and fabric code push with heapq on the same list, so the layout must be heapq's."""
    world = World("heap", {}, 0)
    world.add_node("a", "node")
    ctx = Context(world)
    ctx.node = "a"
    reference: list[Event] = []
    for index in range(500):
        t_ns = (index * 7919) % 61  # many equal times: the seq breaks the ties
        seq = world.seq
        if index % 2:
            ctx.deliver(t_ns, "a", "tick", index)
        else:
            ctx.timer(t_ns, "tick", index)
        heapq.heappush(reference, Event(t_ns, seq, "a", "tick", index))
        assert world.queue == reference
    assert all(type(event) is Event for event in world.queue)


def test_the_environment_switch_selects_the_pure_python_code_of_every_layer() -> None:
    env = {**os.environ, speedups.PURE_PYTHON_ENV: "1"}
    code = (
        "import importlib, sys\n"
        "from timetravel.sim import speedups\n"
        "print(speedups.kernel_implementation())\n"
        f"for layer in {sorted(LAYER_SPEEDUPS)!r}:\n"
        "    print(layer, importlib.import_module(f'timetravel.{layer}.speedups').compiled)\n"
        "print(sorted(name for name in sys.modules if name.endswith('._speedups')))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    assert completed.stdout.split("\n") == [
        "python",
        *(f"{layer} None" for layer in sorted(LAYER_SPEEDUPS)),
        "[]",  # not one extension is even imported
        "",
    ]


def test_the_kernel_bench_says_which_kernel_ran() -> None:
    from timetravel.bench.kernel import run_bench

    figures = run_bench(quick=True)["figures"]
    assert figures["kernel_implementation"] == speedups.kernel_implementation()
    assert figures["timeout_ratio_vs_simpy"] > 0


INT_EDGES = [
    0,
    1,
    31,
    32,
    127,
    128,
    255,
    256,
    65535,
    65536,
    (1 << 32) - 1,
    1 << 32,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
    -1,
    -32,
    -33,
    -128,
    -129,
    -32768,
    -32769,
    -(1 << 31),
    -(1 << 31) - 1,
    -(1 << 63),
]
STRINGS = ["", "a", "p12", "x" * 31, "x" * 32, "y" * 255, "y" * 256, "z" * 65535, "z" * 65536, "é∑🙂", "wake"]


def test_chain_batches_pack_to_the_bytes_encoding_pack_gives() -> None:
    """The chain's bytes are recorded and hashed: the compiled packer must match msgpack byte for byte."""
    import random

    import numpy as np

    from timetravel.sim.encoding import pack
    from timetravel.sim.kernel import pack_chain_batch

    generator = random.Random(18)
    payloads: list[Any] = [
        None,
        True,
        False,
        1.5,
        b"raw",
        [1, "two", None],
        [],
        [0, 7, 123_456],
        (3, "comm", 99),
        [1 << 63, -(1 << 40), "x" * 40],
        list(range(17)),
        [1, [2, 3]],
        [1, 2.5],
        [True, 1],
        {"a": [1, 2]},
        *INT_EDGES,
        *STRINGS,
    ]
    payloads.append(np.arange(6, dtype=np.float32).reshape(2, 3))
    for length in (0, 1, 15, 16, 300, 4096, 70_000):
        batch = [
            Event(
                generator.choice(INT_EDGES[:15]) if index % 3 else index,
                generator.choice(INT_EDGES[:15]),
                generator.choice(STRINGS),
                generator.choice(STRINGS[:6]),
                generator.choice(payloads),
            )
            for index in range(length)
        ]
        assert pack_chain_batch(batch) == pack(batch)
    # values msgpack refuses or that only Python's path handles: same result or same error
    for odd in (1 << 64, -(1 << 63) - 1, "\ud800", object(), [1, "\ud800"], [object()], [1, 1 << 64]):
        for batch in ([Event(odd, 0, "a", "b", None)], [Event(0, 0, "a", "b", odd)]):  # type: ignore[arg-type]
            try:
                expected: Any = pack(batch)
            except Exception as error:  # the same error type is what is checked
                expected = type(error)
            try:
                got: Any = pack_chain_batch(batch)
            except Exception as error:
                got = type(error)
            assert got == expected
    assert pack_chain_batch([(1, 2, "a", "b", None)]) == pack([(1, 2, "a", "b", None)])  # type: ignore[list-item]


def test_a_built_extension_is_used_unless_switched_off() -> None:
    """A build next to the sources that its loader refuses is stale: ``make install`` rebuilds it.
    Fabric's needs the kernel's (it reads the kernel's objects through sim/_speedups_api.h)."""
    for layer, loader in LAYER_SPEEDUPS.items():
        built = sorted((TESTS.parent / "timetravel" / layer).glob("_speedups*.so"))
        if built and not speedups.pure_python() and (layer != "fabric" or speedups.compiled is not None):
            assert loader.compiled is not None, f"{built[0]} is stale: run make install"
        if loader.compiled is not None:
            assert loader.compiled.INTERFACE_VERSION == loader.INTERFACE_VERSION
            assert loader.compiled.__name__ == f"timetravel.{layer}._speedups"
    if speedups.compiled is None:
        assert fabric_speedups.compiled is None


def test_a_ctrl_c_while_the_compiled_packer_calls_back_into_python_is_raised_not_swallowed() -> None:
    """The compiled packer falls back to Python when a payload's ``pack`` fails, so it cleared the
    error; a Ctrl-C that came during that call (a dict payload: a torch run's every call event) was
    cleared with it and the run went on (issue 32's soak: 3 Ctrl-Cs in 50 ignored)."""
    import pytest

    from timetravel.sim.encoding import pack

    if speedups.compiled is None:
        assert speedups.kernel_implementation() == "python"
        return
    batch = [Event(0, 0, "a", "b", {"payload": 1})]

    def interrupted(value: Any) -> bytes:
        raise KeyboardInterrupt

    def refusing(value: Any) -> bytes:
        raise ValueError("Python's path says why")

    with pytest.raises(KeyboardInterrupt):
        speedups.compiled.pack_events(batch, interrupted)
    assert speedups.compiled.pack_events(batch, refusing) is None  # Python packs it and raises its own
    assert speedups.compiled.pack_events(batch, pack) == pack(batch)


def test_the_kernels_extension_holds_the_kernel_only() -> None:
    """The layers above keep their C with them: the kernel's module has its loop, its Context core
    and its packer, and the C interface fabric's engine uses (issue 29)."""
    if speedups.compiled is None:
        assert speedups.kernel_implementation() == "python"
        return
    names = {name for name in dir(speedups.compiled) if not name.startswith("__")}
    assert names == {
        "ContextCore",
        "INTERFACE_VERSION",
        "configure",
        "kernel_api",
        "pack_events",
        "run_segment",
    }


def test_each_layers_c_includes_its_own_headers_and_the_kernels_interface_only() -> None:
    """Imports only go down, in C too: a layer's C includes its own folder's headers and, from
    below, only the kernel's C interface (sim/_speedups_api.h: its module maker, and for fabric the
    kernel's objects); the kernel's C includes nothing of a layer above (issue 29: it compiled
    knowledge of GPUs, trees and the file format)."""
    found = {}
    for layer in LAYER_SPEEDUPS:
        folder = TESTS.parent / "timetravel" / layer
        for source in sorted([*folder.glob("_speedups*.c"), *folder.glob("_speedups*.h")]):
            for included in re.findall(r'^#include "([^"]+)"', source.read_text(), flags=re.MULTILINE):
                target = (folder / included).resolve()
                assert target.is_file(), f"{source.name} includes {included}, which does not exist"
                if target.parent != folder:
                    found[f"{layer}/{source.name}"] = str(target.relative_to(TESTS.parent / "timetravel"))
    below = {f"{layer}/_speedups.c": "sim/_speedups_api.h" for layer in ("fabric", "snapshot", "recording")}
    assert found == below
