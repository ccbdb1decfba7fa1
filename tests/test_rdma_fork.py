"""rdma_fork: the model, its two symptoms in one bucket, the fixes and the counter-checks, minimize.

Fast tests force a failing layout on one host of a small world by pinning that host's choices
(the same overrides a minimizer or a branch uses), so every assertion is about the mechanism and
none depends on a lucky seed. The sweep at the default size is in test_rdma_fork_slow.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from timetravel.explore.minimize import Minimizer
from timetravel.explore.minimize_trials import Budget
from timetravel.scenarios import get_scenario
from timetravel.scenarios.rdma_fork import memory, process
from timetravel.sim import ConfigError, Simulation

SCENARIO = get_scenario("rdma_fork")
SMALL = {"nodes": 8, "last_node": 7}
SIGNATURE = "crash:rdma.fork_child.missing_page"
ISSUE_KEYS = (
    "nodes",
    "launches_per_node",
    "launch",
    "fork_safe",
    "kernel",
    "force_fork_safe",
    "register_align",
    "register_check",
    "faults",
)
SEGFAULT_PINS = {
    ("n5", "alloc.arena.used", 1): 0,  # thread arena 2 is fresh
    ("n5", "rdma.c6.arena", 0): 2,  # communicator c6 is made on that thread
    ("n5", "rdma.c6.slot", 0): 0,  # at the arena's top: its first chunk, on the header's page
}
EFAULT_PINS = {
    ("n3", "rdma.c6.arena", 0): 0,
    ("n3", "alloc.environ.slot", 0): 1,  # environ at the main heap's first slot
    ("n3", "rdma.c6.slot", 0): 83,  # the communicator struct right after it, on the same page
    **{("n3", "alloc.python.slot", index): 0 for index in range(len(process.PYTHON_OBJECTS))},
}
FIXES = (
    {"launch": "posix_spawn"},
    {"launch": "vfork"},
    {"register_align": "page"},
    {"kernel": "5.15", "force_fork_safe": "off"},
)


def run(settings: dict[str, Any], seed: int = 0, pins: dict[tuple[str, str, int], int] | None = None) -> Any:
    config = SCENARIO.resolve_config({**SMALL, **settings})
    world = SCENARIO.build(config, seed)
    result = Simulation(SCENARIO, world, overrides=pins).run()
    return result, world


def test_the_scenario_is_built_in_with_every_key_of_the_issue() -> None:
    defaults = SCENARIO.defaults()
    assert all(key in defaults for key in ISSUE_KEYS)
    assert defaults["nodes"] == 1024
    assert SCENARIO.param("launch").choices == ("fork_exec", "posix_spawn", "vfork", "mp_fork")
    assert all(SCENARIO.param(name).shrinkable for name in ("nodes", "communicators", "launches_per_node"))


def test_registration_rounds_out_to_pages_and_marks_them_dontfork() -> None:
    space = memory.new_address_space([0])
    struct = memory.allocate(space, "c0.struct", "struct", 416, 1, 0)
    assert struct["chunk"] == memory.THREAD_HEAP_BASE + memory.ARENA_HEADER_BYTES
    registration = memory.register(space, "c6.flush", struct["address"] + 0x120, 4, dontfork=True)
    assert registration["pages"] == 1 and not registration["aligned"]
    page = memory.page_of(memory.THREAD_HEAP_BASE)
    assert memory.dontfork_owner(space, page) is registration
    assert memory.dontfork_owner(space, page + 1) is None
    contents = memory.page_contents(space, page)
    assert contents[0].startswith("arena 1 metadata") and any("c0.struct" in item for item in contents)
    straddling = memory.register(space, "wide", memory.THREAD_HEAP_BASE + 4090, 12, dontfork=False)
    assert straddling["pages"] == 2 and memory.dontfork_owner(space, page + 1) is None


def test_a_struct_on_a_fresh_arenas_first_page_segfaults_the_forked_child() -> None:
    result, world = run({}, pins=SEGFAULT_PINS)
    failure = result.failure
    assert failure["signature"] == SIGNATURE and failure["kind"] == "crash"
    assert failure["node"] == "n5" and failure["t_ns"] == world.nodes["n5"]["last_launch"]["t_ns"] > 0
    assert "SIGSEGV" in failure["message"] and "__malloc_fork_unlock_child" in failure["message"]
    detail = world.nodes["n5"]["fork_failure"]
    arena_page = memory.page_address(memory.page_of(memory.THREAD_HEAP_BASE + memory.HEAP_MAX_BYTES))
    assert detail["page"] == arena_page and detail["launch"] == 0 and detail["method"] == "fork_exec"
    assert detail["registration"]["name"] == "c6.flush" and detail["registration"]["bytes"] == 4
    assert detail["lived_on"][0].startswith("arena 2 metadata")
    rows = {row["page"]: row for row in detail["page_map"]}
    assert len(rows) == 5 and not rows[arena_page]["in_child"]
    assert rows[arena_page]["dontfork_by"] == "c6.flush"
    assert "died with <Signals.SIGSEGV: 11>" in detail["parent_sees"]


def test_environ_on_a_dontfork_page_is_errno_14_in_the_same_bucket() -> None:
    result, world = run({}, pins=EFAULT_PINS)
    assert result.failure["signature"] == SIGNATURE and result.failure["node"] == "n3"
    assert "OSError: [Errno 14] Bad address" in result.failure["message"]
    detail = world.nodes["n3"]["fork_failure"]
    assert detail["symptom"] == "OSError: [Errno 14] Bad address"
    assert detail["page"] == memory.page_address(memory.page_of(memory.MAIN_HEAP_BASE))
    assert any(item.startswith("environ:") for item in detail["lived_on"])


@pytest.mark.parametrize("pins", [SEGFAULT_PINS, EFAULT_PINS], ids=["sigsegv", "errno14"])
@pytest.mark.parametrize("fix", FIXES, ids=lambda fix: ",".join(f"{k}={v}" for k, v in fix.items()))
def test_each_fix_passes_on_a_failing_layout(fix: dict[str, str], pins: dict[Any, int]) -> None:
    result, world = run(fix, pins=pins)
    assert result.outcome == "pass", result.failure
    assert (
        sum(state["launches"] for state in world.nodes.values())
        == 8 * SCENARIO.defaults()["launches_per_node"]
    )


@pytest.mark.parametrize("pins", [SEGFAULT_PINS, EFAULT_PINS], ids=["sigsegv", "errno14"])
@pytest.mark.parametrize("change", [{"kernel": "5.15"}, {"launch": "mp_fork"}], ids=["override", "mp_fork"])
def test_the_kernel_override_and_a_python_fork_worker_still_fail(change: dict[str, str], pins: Any) -> None:
    result, _world = run(change, pins=pins)
    assert result.failure["signature"] == SIGNATURE


def test_register_check_strict_fails_at_start_up_with_a_clear_message() -> None:
    for seed in range(3):
        result, _world = run({"register_check": "strict"}, seed=seed)
        failure = result.failure
        assert failure["signature"] == "assertion:rdma.register_check" and failure["t_ns"] == 0
        assert (
            "is not page-aligned" in failure["message"] and "out of every forked child" in failure["message"]
        )
    assert run({"register_check": "strict", "register_align": "page"})[0].outcome == "pass"
    assert run({"register_check": "strict", "kernel": "5.15", "force_fork_safe": "off"})[0].outcome == "pass"


def test_fork_safety_off_on_an_old_kernel_is_no_fix() -> None:
    result, _world = run({"fork_safe": "off"})
    assert result.failure["signature"] == "assertion:rdma.fork_without_fork_safety"
    assert run({"fork_safe": "off", "kernel": "5.15"})[0].outcome == "pass"


def test_same_seed_same_bits_and_the_model_is_sparse() -> None:
    first = run({}, seed=4)[1]
    second = run({}, seed=4)[1]
    assert first.state_hash() == second.state_hash()
    config = SCENARIO.resolve_config({})
    world = SCENARIO.build(config, 0)
    Simulation(SCENARIO, world).run(max_events=2 * 1024)
    space = world.nodes["n0"]["space"]
    assert len(world.nodes) == 1024
    assert len(space["allocations"]) <= 1 + len(process.PYTHON_OBJECTS) + 2 + 2
    assert len(space["registrations"]) == 4 and len(space["arenas"]) == 1 + process.THREAD_ARENAS


def test_bad_config_is_one_line_naming_the_key(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    with pytest.raises(ConfigError, match="'last_node'"):
        SCENARIO.build(SCENARIO.resolve_config({"nodes": 2000}), 0)
    completed = run_cli("run", "rdma_fork", "--set", "kernel=five")
    assert completed.returncode == 2
    assert "kernel" in completed.stderr and "Traceback" not in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1


def test_minimize_shrinks_to_one_node_one_registration_one_launch() -> None:
    config = SCENARIO.resolve_config(SMALL)
    result = Minimizer(SCENARIO, config, 0, SEGFAULT_PINS, budget=Budget(max_runs=300)).run()
    assert result.signature == SIGNATURE
    shrunk = result.config
    assert (shrunk["nodes"], shrunk["communicators"], shrunk["registered_buffers"]) == (1, 1, 0)
    assert shrunk["launches_per_node"] == 1
    assert "SIGSEGV" in result.failure["message"]
