"""One host's training process: its start-up (allocations and registrations) and its launches.

Choice sites, each drawn by the host itself (so a host keeps its draws in any world it is in);
value 0 is always the simplest answer:

* ``alloc.arena.used`` (one per thread arena, bound ``ARENA_USED_SLOTS + 1``): how many 16-byte
  slots of that thread's arena were in use when training started; 0 is a fresh arena.
* ``alloc.environ.slot`` and ``alloc.python.slot`` (one per large Python object), bound
  ``MAIN_SLOTS + 1``: where malloc put the C environ array and each object in the main heap; 0 is
  the heap's top, ``v`` the free chunk at slot ``v - 1`` (memory.allocate).
* ``rdma.<c>.arena`` (per communicator ``c``, bound ``THREAD_ARENAS + 1``): the arena of the thread
  that creates the communicator; 0 is the main thread's main arena.
* ``rdma.<c>.slot`` (bound ``MAIN_SLOTS + 1`` or ``ARENA_USED_SLOTS + 1``): where its struct
  lands in that arena (0 the top; a slot past the arena's used span is the top too).
* ``rdma.launch.jitter``: the extra delay before each launch, in [0, launch_jitter].

A launch that forks (``fork_exec``, ``mp_fork``) copies every page but those a registration marked
``MADV_DONTFORK``; the child then touches, in order, what its path needs (``child_touches``), and
the first page it lacks ends the launch: SIGSEGV, or ``OSError: [Errno 14] Bad address`` when the
page was the environ array that ``execve`` had to read. Either way it is one failure, kind
``crash``, site ``rdma.fork_child.missing_page`` — one bucket for one mechanism.
"""

from __future__ import annotations

from typing import Any

from timetravel.scenarios.rdma_fork import memory
from timetravel.scenarios.rdma_fork.params import (
    EAGER_COPY_KERNEL,
    FORKING_LAUNCHES,
    communicator_names,
    dontfork_applies,
    helper_names,
    kernel_version,
)
from timetravel.sim import Context, Event

THREAD_ARENAS = 4
"""Threads that malloc'd before training (NCCL's proxy thread, a pin-memory thread, ...)."""
MAIN_SLOTS = memory.MAIN_USED_BYTES // memory.CHUNK_ALIGN_BYTES
ENVIRON_BYTES = 8 * 160
"""The environ array: 160 variables' pointers (a training job's environment is long)."""
COMMUNICATOR_STRUCT_BYTES = 416
FLUSH_OFFSET_BYTES = 0x120
FLUSH_BYTES = 4
REGISTERED_BUFFER_BYTES = 4 * 1024 * 1024
PYTHON_OBJECTS = (
    ("py.dataset_index", "Python object: the dataset's sample-offset array", 256 * 1024),
    ("py.vocabulary", "Python object: the tokenizer's vocabulary dict table", 96 * 1024),
    ("py.batch_queue", "Python object: the loader's batch queue", 24 * 1024),
    ("py.config", "Python object: the parsed training config", 6 * 1024),
)
FAILURE_SITE = "rdma.fork_child.missing_page"
REGISTER_CHECK_SITE = "rdma.register_check"
FORK_UNSAFE_SITE = "rdma.fork_without_fork_safety"
START = "start"
LAUNCH = "launch"
FAILURES_KEPT = 1


def initial_state(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "incarnation": 0,
        "space": None,
        "launches": 0,
        "last_launch": None,
        "fork_failure": None,
        "child_missing": {},
        "fork_unsafe": False,
    }


# -- start-up -----------------------------------------------------------------------------------


def on_start(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """The training process starts: the allocator's state, the Python objects, the registrations."""
    if event.payload != state["incarnation"]:
        return
    config = ctx.config
    used = [
        memory.CHUNK_ALIGN_BYTES * ctx.choose("alloc.arena.used", memory.ARENA_USED_SLOTS + 1)
        for _ in range(THREAD_ARENAS)
    ]
    space = memory.new_address_space(used)
    state["space"] = space
    memory.allocate(
        space,
        "environ",
        "the C environ array (execve's envp)",
        ENVIRON_BYTES,
        memory.MAIN_ARENA,
        ctx.choose("alloc.environ.slot", MAIN_SLOTS + 1),
    )
    for name, what, size in PYTHON_OBJECTS:
        memory.allocate(
            space, name, what, size, memory.MAIN_ARENA, ctx.choose("alloc.python.slot", MAIN_SLOTS + 1)
        )
    dontfork = dontfork_applies(config)
    for number in range(config["registered_buffers"]):
        name = f"buffer{number}"
        buffer = memory.map_pages(
            space, name, "registered data buffer (page-aligned mmap)", REGISTERED_BUFFER_BYTES
        )
        memory.register(space, name, buffer["address"], REGISTERED_BUFFER_BYTES, dontfork)
    for communicator in communicator_names(config):
        registration = _make_communicator(space, communicator, config, dontfork, ctx)
        if config["register_check"] == "strict" and dontfork and not registration["aligned"]:
            _refuse_registration(space, registration, ctx)
            return
    state["child_missing"] = {method: first_missing_page(space, method) for method in FORKING_LAUNCHES}
    state["fork_unsafe"] = _fork_unsafe(space, config)
    _next_launch(state, 0, ctx)


def _make_communicator(
    space: dict[str, Any], communicator: str, config: dict[str, Any], dontfork: bool, ctx: Context
) -> dict[str, Any]:
    arena = ctx.choose(f"rdma.{communicator}.arena", THREAD_ARENAS + 1)
    slots = MAIN_SLOTS if arena == memory.MAIN_ARENA else memory.ARENA_USED_SLOTS
    slot = ctx.choose(f"rdma.{communicator}.slot", slots + 1)
    struct = memory.allocate(
        space, f"{communicator}.struct", "NCCL communicator struct", COMMUNICATOR_STRUCT_BYTES, arena, slot
    )
    name = f"{communicator}.flush"
    if config["register_align"] == "page":
        page = memory.map_pages(space, name, "flush buffer (its own page-aligned mmap)", memory.PAGE_BYTES)
        return memory.register(space, name, page["address"], memory.PAGE_BYTES, dontfork)
    return memory.register(space, name, struct["address"] + FLUSH_OFFSET_BYTES, FLUSH_BYTES, dontfork)


def _refuse_registration(space: dict[str, Any], registration: dict[str, Any], ctx: Context) -> None:
    page = registration["first_page"]
    others = [item for item in memory.page_contents(space, page) if not item.startswith("registered")]
    ctx.fail(
        "assertion",
        f"register_check=strict refused {registration['name']}: {registration['bytes']} B at "
        f"0x{registration['address']:x} is not page-aligned, and under fork safety it would take page "
        f"{memory.page_address(page)} ({'; '.join(others)}) out of every forked child",
        site=REGISTER_CHECK_SITE,
    )


# -- launches -----------------------------------------------------------------------------------


def _next_launch(state: dict[str, Any], number: int, ctx: Context) -> None:
    config = ctx.config
    jitter = config["launch_jitter"]
    delay = config["launch_every"] + (ctx.choose("rdma.launch.jitter", jitter + 1) if jitter else 0)
    ctx.timer(delay, LAUNCH, [state["incarnation"], number])


def on_launch(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """Launch helper ``number``: fork (or not), run the child's pre-exec path, exec."""
    incarnation, number = event.payload
    if incarnation != state["incarnation"] or state["space"] is None:
        return
    config = ctx.config
    helpers = helper_names(config)
    helper = helpers[number % len(helpers)]
    method = config["launch"]
    state["launches"] += 1
    state["last_launch"] = {"number": number, "helper": helper, "method": method, "t_ns": ctx.now}
    if method in FORKING_LAUNCHES:
        if state["fork_unsafe"]:
            _fail_fork_unsafe(state, helper, method, ctx)
            return
        missing = state["child_missing"][method]
        if missing is not None:
            _fail_launch(state, number, helper, method, missing, ctx)
            return
    if number + 1 < config["launches_per_node"]:
        _next_launch(state, number + 1, ctx)


def child_touches(space: dict[str, Any], method: str) -> list[tuple[range, str, str]]:
    """(pages, what the child does there, how it ends when a page is missing), in the child's order."""
    touches = []
    for arena in space["arenas"]:
        page = memory.header_page(arena)
        if page is not None:
            action = f"__malloc_fork_unlock_child re-initializes arena {arena['index']}'s mutex"
            touches.append((range(page, page + 1), action, "SIGSEGV"))
    environ = memory.pages_of(space["allocations"][0])
    if method == "fork_exec":
        touches.append((environ, "execve reads the environ array (envp)", "EFAULT"))
    else:
        touches.append((environ, "getenv walks the environ array", "SIGSEGV"))
    if method == "mp_fork":
        for allocation in space["allocations"]:
            if allocation["name"].startswith("py."):
                touches.append(
                    (memory.pages_of(allocation), f"the worker reads {allocation['name']}", "SIGSEGV")
                )
    return touches


def first_missing_page(space: dict[str, Any], method: str) -> dict[str, Any] | None:
    """The first page the child touches that fork did not copy, with the index of the registration that
    took it. The address space does not change after start-up, so on_start asks this once per method;
    it compares page ranges, never single pages, so a large object costs no more than a small one."""
    dontfork = [
        (index, registration)
        for index, registration in enumerate(space["registrations"])
        if registration["dontfork"]
    ]
    if not dontfork:
        return None
    for pages, action, symptom in child_touches(space, method):
        hits = [
            (max(pages.start, registration["first_page"]), index)
            for index, registration in dontfork
            if registration["first_page"] < pages.stop
            and pages.start < registration["first_page"] + registration["pages"]
        ]
        if hits:
            page, index = min(hits)
            return {"page": page, "action": action, "symptom": symptom, "registration": index}
    return None


def _parent_sees(helper: str, symptom: str) -> str:
    if symptom == "EFAULT":
        return f"OSError: [Errno 14] Bad address: '{helper}'"
    return f"subprocess.CalledProcessError: Command '['{helper}']' died with <Signals.SIGSEGV: 11>."


def _fail_launch(
    state: dict[str, Any], number: int, helper: str, method: str, missing: dict[str, Any], ctx: Context
) -> None:
    space = state["space"]
    page, registration = missing["page"], space["registrations"][missing["registration"]]
    lived_on = [item for item in memory.page_contents(space, page) if not item.startswith("registered")]
    parent = _parent_sees(helper, missing["symptom"])
    state["fork_failure"] = {
        "launch": number,
        "helper": helper,
        "method": method,
        "page": memory.page_address(page),
        "child_was": missing["action"],
        "symptom": "OSError: [Errno 14] Bad address" if missing["symptom"] == "EFAULT" else "SIGSEGV",
        "parent_sees": parent,
        "registration": {
            "name": registration["name"],
            "address": f"0x{registration['address']:x}",
            "bytes": registration["bytes"],
            "rounded_to": f"{registration['pages']} page(s) from {memory.page_address(registration['first_page'])}",
        },
        "lived_on": lived_on,
        "page_map": memory.page_map(space, page),
    }
    death = "execve failed" if missing["symptom"] == "EFAULT" else "the child died with SIGSEGV before exec"
    if method == "mp_fork":
        death = "the forked worker died with SIGSEGV"
    ctx.fail(
        "crash",
        f"launch {number} ({helper}, {method}): {death}: {missing['action']} on page "
        f"{memory.page_address(page)}, absent in the child: MADV_DONTFORK by registration "
        f"{registration['name']} ({registration['bytes']} B at 0x{registration['address']:x}, rounded out to "
        f"the page), which also held {'; '.join(lived_on) or 'nothing else'}. The parent sees: {parent}",
        site=FAILURE_SITE,
    )


def _fork_unsafe(space: dict[str, Any], config: dict[str, Any]) -> bool:
    """fork_safe=off on a kernel that shares pinned pages copy-on-write with the child."""
    old_kernel = kernel_version(config["kernel"]) < EAGER_COPY_KERNEL
    return config["fork_safe"] == "off" and old_kernel and bool(space["registrations"])


def _fail_fork_unsafe(state: dict[str, Any], helper: str, method: str, ctx: Context) -> None:
    registration = state["space"]["registrations"][0]
    ctx.fail(
        "assertion",
        f"launch of {helper} ({method}) with fork_safe=off on kernel {ctx.config['kernel']}: registered "
        f"{registration['name']} at 0x{registration['address']:x} is now copy-on-write shared with the child; "
        "the parent's next write moves it to a new page while the NIC keeps using the old one (silent "
        "corruption, the reason fork safety exists)",
        site=FORK_UNSAFE_SITE,
    )


# -- faults: a crashed host restarts its training process ---------------------------------------


def on_crash(state: dict[str, Any], ctx: Context, record: dict[str, Any]) -> None:
    """The process is gone: its launches stop (the next incarnation starts afresh)."""
    state["incarnation"] += 1
    state["space"] = None
    state["child_missing"] = {}


def on_restart(state: dict[str, Any], ctx: Context, record: dict[str, Any]) -> None:
    """The job restarts this host's process: a new address space, drawn anew."""
    ctx.timer(0, START, state["incarnation"])


HANDLERS = {START: on_start, LAUNCH: on_launch}
