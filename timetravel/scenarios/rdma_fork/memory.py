"""One training process's address space at page granularity, as plain data, modelled sparsely.

Nothing here keeps a Python object per page: a process is a few lists of *allocations* (address,
size, what) in *arenas* (glibc's main heap and its per-thread heaps), a list of RDMA
*registrations* (address, size, the page range they were rounded out to, whether that range was
marked ``MADV_DONTFORK``), and the questions asked of them compute pages from those lists on
demand. A 1,024-node world holds some twenty records per node, not millions of pages.

What lives where (x86-64 glibc and CPython, simplified to what the bug needs):

* The **main arena** is the brk heap. Its ``malloc_state`` lives in libc's data, not on the heap,
  so no heap page of it holds allocator metadata.
* A **thread arena** is an mmap'd heap of up to ``HEAP_MAX_BYTES``; its first
  ``ARENA_HEADER_BYTES`` (``heap_info`` and the arena's ``malloc_state``, with its mutex) sit on
  the heap's first page, and its first chunks follow on that same page. ``fork()`` in glibc runs
  ``__malloc_fork_unlock_child`` in the child, which walks every arena and re-initializes its
  mutex: it writes to that first page.
* The C ``environ`` array is malloc'd in the main arena (``setenv`` reallocates it; the network
  plugin of the real incident set the fork-safe variable itself). ``execve`` reads it, and a
  getenv in a forked child walks it.
* Large **Python objects** (a dataset index, a tokenizer table) are malloc'd in the main arena; a
  multiprocessing or DataLoader worker that keeps running Python after fork touches them.
* A **communicator** is a malloc'd struct whose ``FLUSH_OFFSET_BYTES`` holds a 4-byte flush
  buffer that is registered with the NIC; the registration rounds out to whole pages, so with fork
  safety the page of the struct — and whatever else lives on it — disappears from every child.

Placement is a choice (see placement's ``value``): 0 is the simplest answer, the arena's *top*
(fresh memory past every chunk), and ``v >= 1`` reuses a free chunk at slot ``v - 1`` (16-byte
units) of the arena's used span, which is where a real allocator's free lists put small chunks.
"""

from __future__ import annotations

from typing import Any

PAGE_BYTES = 4096
CHUNK_ALIGN_BYTES = 16
CHUNK_HEADER_BYTES = 16
HEAP_MAX_BYTES = 64 * 1024 * 1024
"""glibc's HEAP_MAX_SIZE on 64-bit: the most a thread arena's heap grows to."""
ARENA_HEADER_BYTES = 0x8A0
"""``heap_info`` plus ``malloc_state`` at the start of a thread arena's heap (about 2.2 KiB)."""
ARENA_USED_SLOTS = (HEAP_MAX_BYTES - ARENA_HEADER_BYTES) // CHUNK_ALIGN_BYTES - PAGE_BYTES
"""A thread arena has used between 0 (fresh) and nearly all its heap when the communicators are made."""
MAIN_USED_BYTES = 128 * 1024 * 1024
"""What the interpreter and the framework allocated in the main heap before training starts."""
MAIN_HEAP_BASE = 0x5555_5555_8000
THREAD_HEAP_BASE = 0x7F10_0000_0000
MMAP_BASE = 0x7F80_0000_0000
"""Where page-aligned mappings (registered data buffers, page-aligned flush buffers) go."""
MAIN_ARENA = 0


def page_of(address: int) -> int:
    return address // PAGE_BYTES


def page_address(page: int) -> str:
    return f"0x{page * PAGE_BYTES:x}"


def round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def new_address_space(thread_arena_used_bytes: list[int]) -> dict[str, Any]:
    """A process with its main arena and one thread arena per entry (its used bytes)."""
    arenas = [
        {
            "index": MAIN_ARENA,
            "base": MAIN_HEAP_BASE,
            "first_chunk": MAIN_HEAP_BASE,
            "used_bytes": MAIN_USED_BYTES,
        }
    ]
    for number, used in enumerate(thread_arena_used_bytes, start=1):
        base = THREAD_HEAP_BASE + (number - 1) * HEAP_MAX_BYTES
        arenas.append(
            {"index": number, "base": base, "first_chunk": base + ARENA_HEADER_BYTES, "used_bytes": used}
        )
    for arena in arenas:
        arena["top"] = arena["first_chunk"] + arena["used_bytes"]
    return {"arenas": arenas, "allocations": [], "registrations": [], "mmap_next": MMAP_BASE}


def allocate(
    space: dict[str, Any], name: str, what: str, size: int, arena_index: int, value: int
) -> dict[str, Any]:
    """malloc(size) in an arena: at the top for ``value`` 0 (or a slot past the used span), else the
    free chunk at slot ``value - 1``; a slot that overlaps an earlier allocation falls back to the top."""
    arena = space["arenas"][arena_index]
    chunk_bytes = round_up(size + CHUNK_HEADER_BYTES, CHUNK_ALIGN_BYTES)
    chunk = None
    if value >= 1 and (value - 1) * CHUNK_ALIGN_BYTES + chunk_bytes <= arena["used_bytes"]:
        chunk = arena["first_chunk"] + (value - 1) * CHUNK_ALIGN_BYTES
        if any(_overlaps(other, chunk, chunk_bytes) for other in space["allocations"]):
            chunk = None
    if chunk is None:
        chunk = arena["top"]
        arena["top"] += chunk_bytes
    allocation = {
        "name": name,
        "what": what,
        "arena": arena_index,
        "chunk": chunk,
        "address": chunk + CHUNK_HEADER_BYTES,
        "bytes": size,
        "placed": "top" if chunk >= arena["first_chunk"] + arena["used_bytes"] else "free chunk",
    }
    space["allocations"].append(allocation)
    return allocation


def _overlaps(allocation: dict[str, Any], chunk: int, chunk_bytes: int) -> bool:
    start = allocation["chunk"]
    end = allocation["address"] + allocation["bytes"]
    return start < chunk + chunk_bytes and chunk < end


def map_pages(space: dict[str, Any], name: str, what: str, size: int) -> dict[str, Any]:
    """mmap(size): fresh page-aligned memory of its own (nothing else ever shares its pages)."""
    address = space["mmap_next"]
    space["mmap_next"] = address + round_up(size, PAGE_BYTES) + PAGE_BYTES
    allocation = {
        "name": name,
        "what": what,
        "arena": None,
        "chunk": address,
        "address": address,
        "bytes": size,
        "placed": "mmap",
    }
    space["allocations"].append(allocation)
    return allocation


def register(space: dict[str, Any], name: str, address: int, size: int, dontfork: bool) -> dict[str, Any]:
    """ibv_reg_mr: pin [address, address + size), rounded out to whole pages; with fork safety
    the rounded range is marked MADV_DONTFORK."""
    first = page_of(address)
    last = page_of(address + size - 1)
    registration = {
        "name": name,
        "address": address,
        "bytes": size,
        "first_page": first,
        "pages": last - first + 1,
        "aligned": address % PAGE_BYTES == 0 and size % PAGE_BYTES == 0,
        "dontfork": dontfork,
    }
    space["registrations"].append(registration)
    return registration


def dontfork_owner(space: dict[str, Any], page: int) -> dict[str, Any] | None:
    """The registration whose rounding took ``page`` out of forked children, or None."""
    for registration in space["registrations"]:
        first = registration["first_page"]
        if registration["dontfork"] and first <= page < first + registration["pages"]:
            return registration
    return None


def pages_of(allocation: dict[str, Any]) -> range:
    return range(page_of(allocation["address"]), page_of(allocation["address"] + allocation["bytes"] - 1) + 1)


def header_page(arena: dict[str, Any]) -> int | None:
    """The page holding a thread arena's heap_info and malloc_state (None for the main arena)."""
    return None if arena["index"] == MAIN_ARENA else page_of(arena["base"])


def arena_name(arena: dict[str, Any]) -> str:
    return "main arena" if arena["index"] == MAIN_ARENA else f"arena {arena['index']}"


def page_contents(space: dict[str, Any], page: int) -> list[str]:
    """What lives on ``page``: arena metadata, allocations, registrations (for people)."""
    contents = []
    for arena in space["arenas"]:
        if header_page(arena) == page:
            contents.append(f"arena {arena['index']} metadata (heap_info, malloc_state and its mutex)")
    low, high = page * PAGE_BYTES, (page + 1) * PAGE_BYTES
    for arena in space["arenas"]:
        end = arena["base"] + (
            HEAP_MAX_BYTES if arena["index"] != MAIN_ARENA else arena["top"] - arena["base"]
        )
        if arena["base"] < high and low < arena["top"]:
            contents.append(f"{arena_name(arena)} heap: chunks the model does not track")
        elif arena["top"] < high and low < end:
            contents.append(f"{arena_name(arena)} heap: free, above its top")
    for allocation in space["allocations"]:
        start, end = allocation["chunk"], allocation["address"] + allocation["bytes"]
        if start < high and low < end:
            contents.append(
                f"{allocation['name']}: {allocation['what']} ({allocation['bytes']} B at 0x{allocation['address']:x})"
            )
    for registration in space["registrations"]:
        first = registration["first_page"]
        if first <= page < first + registration["pages"]:
            flag = "DONTFORK" if registration["dontfork"] else "pinned"
            contents.append(
                f"registered {registration['name']} ({registration['bytes']} B at 0x{registration['address']:x}, {flag})"
            )
    return contents


def page_map(space: dict[str, Any], page: int, radius: int = 2) -> list[dict[str, Any]]:
    """The pages around ``page``: address, whether a forked child gets it, what lives there."""
    rows = []
    for number in range(page - radius, page + radius + 1):
        owner = dontfork_owner(space, number)
        rows.append(
            {
                "page": page_address(number),
                "in_child": owner is None,
                "dontfork_by": None if owner is None else owner["name"],
                "contents": page_contents(space, number),
            }
        )
    return rows
