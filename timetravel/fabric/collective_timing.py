"""When each rank of a collective finishes, from the topology and the link tables (collective level).

The collective level (:mod:`timetravel.fabric.collective`) computes a collective's timing here once
its last member has entered: the same topology and link tables the message level uses, folded into
one completion time per rank.

**Timing, folded analytically** (docs/performance.md, "fabric levels"):

* ``ring_completions``: the ring's message recurrence solved over all ranks at once. Rank r sends
  ring step p when it has entered, has taken step p-1 from its predecessor and its previous chunk
  has left the edge's slowest link: ``T[r, p] = max(T[r-1, p-1] + d[r-1], e[r], T[r, p-1] +
  s[r])``, ``T[r, 0] = e[r]``, and it completes when step 2N-3 arrives (in closed form when all
  ranks enter at once and the queueing term cannot bind). ``d[r]`` is the edge r -> r+1 as the link model times one chunk: the latencies of
  its path, the chunk's serialization on its slowest link (a slow fault's bandwidth factor is in
  the link table), and the mean of the per-message jitter. Entry times differ (compute jitter,
  stragglers), so the recurrence, not a closed formula, decides. Several buckets run back to back:
  the second bucket is computed from the first's completions and the rest extrapolated (the
  pattern repeats once the pipeline is full).
* ``tree_completions``: the binary-heap tree of dp_training, chunk by chunk, level by level, each
  message reserved on its links with the same FIFO arithmetic as :func:`network.reserve` (so
  incast on a parent's NIC and a rank's children sharing its out-link queue as they do there).
* ``star_completions``: the parameter server (every rank to rank 0 and back).

Every function takes the links' busy-until times into account and leaves them busy until the
collective's last use of them, so collectives and messages that follow on shared links queue
behind it. ECMP is not drawn: a message between leaves takes spine ``(source + destination) mod
spines``, which spreads the flows as evenly as a draw would on average.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from timetravel.fabric import speedups
from timetravel.fabric.topology import NS_PER_S

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence


# -- links ----------------------------------------------------------------------------------------


def path_links(fabric: dict[str, Any], source: int, destination: int) -> list[int]:
    """The links a message from rank ``source`` to ``destination`` crosses (spine by arithmetic)."""
    ranks, gpus_per_host, ranks_per_leaf, spines, up_base, down_base = fabric["route"]
    if source // gpus_per_host == destination // gpus_per_host:
        return [source, ranks + destination]
    leaf_source = source // ranks_per_leaf
    leaf_destination = destination // ranks_per_leaf
    if leaf_source == leaf_destination:
        return [2 * ranks + source, 3 * ranks + destination]
    spine = (source + destination) % spines
    return [
        2 * ranks + source,
        up_base + leaf_source * spines + spine,
        down_base + leaf_destination * spines + spine,
        3 * ranks + destination,
    ]


def edge_delay_ns(fabric: dict[str, Any], links: list[int], nbytes: int) -> int:
    """Latency of the path plus serialization on its slowest link plus the mean jitter."""
    latency = fabric["link_latency_ns"]
    bandwidth = fabric["link_bytes_per_s"]
    slowest = min(bandwidth[link] for link in links)
    scaled = nbytes * NS_PER_S
    return sum(latency[link] for link in links) + (scaled + slowest - 1) // slowest + fabric["jitter_ns"] // 2


def serialization_ns(fabric: dict[str, Any], links: list[int], nbytes: int) -> int:
    """Time ``nbytes`` occupy the slowest of ``links``."""
    slowest = min(fabric["link_bytes_per_s"][link] for link in links)
    return (nbytes * NS_PER_S + slowest - 1) // slowest


def reserve_path(fabric: dict[str, Any], source: int, destination: int, now: int, nbytes: int) -> int:
    """Send ``nbytes`` from rank ``source`` to ``destination`` at ``now``, queued FIFO behind what
    holds its links (as network.reserve does); its arrival time. The links stay busy until then."""
    links = _Links(fabric)
    arrival = links.reserve(path_links(fabric, source, destination), now, nbytes)
    links.commit()
    return arrival


def occupy(fabric: dict[str, Any], links: Iterable[int], until_ns: int) -> None:
    """Keep ``links`` busy until ``until_ns`` (what a collective timed in closed form leaves behind)."""
    table = fabric["link_busy_until_ns"]
    for link in links:
        if until_ns > table[link]:
            table[link] = until_ns


class _Links:
    """Busy-until times of the links one collective uses, reserved FIFO as network.reserve does."""

    def __init__(self, fabric: dict[str, Any]) -> None:
        self.fabric = fabric
        self.busy: dict[int, int] = {}

    def reserve(self, links: list[int], now: int, nbytes: int) -> int:
        busy = self.busy
        table = self.fabric["link_busy_until_ns"]
        latency = self.fabric["link_latency_ns"]
        bandwidth = self.fabric["link_bytes_per_s"]
        scaled = nbytes * NS_PER_S
        head = now + self.fabric["jitter_ns"] // 2
        tail = 0
        for link in links:
            start = max(busy.get(link, table[link]), head)
            rate = bandwidth[link]
            end = max(start + (scaled + rate - 1) // rate, tail)
            busy[link] = end
            head = start + latency[link]
            tail = end + latency[link]
        return tail

    def commit(self) -> None:
        table = self.fabric["link_busy_until_ns"]
        for link, until in self.busy.items():
            if until > table[link]:
                table[link] = until


# -- timing ---------------------------------------------------------------------------------------


RING_CLOSED_FORM_RANKS_MAX = 2048
"""Up to this many ranks the ring is solved in closed form when the closed form holds."""


def _ring_recurrence(
    entries: np.ndarray, delays: np.ndarray, spacing: np.ndarray, steps: int | None = None
) -> np.ndarray:
    """``T[r, p] = max(T[r-1, p-1] + d[r-1], e[r], T[r, p-1] + s[r])`` for the ``steps`` sends of
    each rank (2N-2 for an all-reduce; the last term: a rank's next chunk queues behind its
    previous one on the edge's slowest link, as the message level's FIFO reservation makes it);
    completion one edge after the last send."""
    ranks = entries.shape[0]
    sends = entries.copy()
    shifted = np.empty_like(sends)
    for _step in range(1, 2 * ranks - 2 if steps is None else steps):
        total = sends + delays
        shifted[1:] = total[:-1]
        shifted[0] = total[-1]
        np.maximum(shifted, entries, out=shifted)
        np.maximum(shifted, sends + spacing, out=sends)
    total = sends + delays
    shifted[1:] = total[:-1]
    shifted[0] = total[-1]
    return shifted


def _ring_closed_form(entries: np.ndarray, delays: np.ndarray) -> np.ndarray:
    """The recurrence unrolled when the queueing term never binds: rank r completes at max over
    sources k of ``e[k]`` plus the longest path k -> r the 2N-2 ring steps allow (delays are >= 0,
    so the longest counts): N edges from r itself, N-1 from r+1, and m+N from the rank m places
    before r otherwise."""
    ranks = entries.shape[0]
    prefix = np.zeros(3 * ranks + 1, dtype=np.int64)
    np.cumsum(np.tile(delays, 3), out=prefix[1:])
    sources = np.arange(ranks, dtype=np.int64)[None, :]
    places = (np.arange(ranks, dtype=np.int64)[:, None] - sources) % ranks
    lengths = np.where(places == 0, ranks, np.where(places == ranks - 1, ranks - 1, places + ranks))
    return (entries[None, :] + prefix[sources + lengths] - prefix[sources]).max(axis=1)


def _ring_once(
    entries: np.ndarray, delays: np.ndarray, spacing: np.ndarray, steps: int | None = None
) -> np.ndarray:
    """The closed form (of the all-reduce's 2N-2 steps) holds when every rank enters at once and no
    chunk outlasts the shortest edge delay (consecutive sends on an edge are then at least that far
    apart); else the recurrence."""
    ranks = entries.shape[0]
    if steps is not None and steps != 2 * ranks - 2:
        return _ring_recurrence(entries, delays, spacing, steps)
    if (
        ranks <= RING_CLOSED_FORM_RANKS_MAX
        and int(spacing.max()) <= int(delays.min())
        and int(entries.min()) == int(entries.max())
    ):
        return _ring_closed_form(entries, delays)
    return _ring_recurrence(entries, delays, spacing)


def ring_edges(fabric: dict[str, Any], members: Sequence[int]) -> list[list[int]]:
    """The links of each ring edge ``members[i] -> members[i+1]`` (the last back to the first)."""
    count = len(members)
    return [
        path_links(fabric, members[position], members[(position + 1) % count]) for position in range(count)
    ]


def ring_completions(
    fabric: dict[str, Any],
    entries: np.ndarray,
    chunk_bytes: int,
    buckets: int = 1,
    members: Sequence[int] | None = None,
    steps: int | None = None,
) -> np.ndarray:
    """Completion time of every member of a ring collective entered at ``entries`` (see the module
    docstring). ``members`` are the ranks in ring order (default: every rank, 0..N-1), ``steps``
    the sends each makes (default 2N-2, an all-reduce; an all-gather or reduce-scatter makes N-1)."""
    ranks = entries.shape[0]
    if ranks == 1:
        return entries.copy()
    table = fabric["link_busy_until_ns"]
    edges = ring_edges(fabric, range(ranks) if members is None else members)
    delays = np.array([edge_delay_ns(fabric, links, chunk_bytes) for links in edges], dtype=np.int64)
    spacing = np.array([serialization_ns(fabric, links, chunk_bytes) for links in edges], dtype=np.int64)
    ready = np.maximum(entries, np.array([table[links[0]] for links in edges], dtype=np.int64))
    first = _ring_once(ready, delays, spacing, steps)
    done = first
    if buckets > 1:
        second = _ring_once(first, delays, spacing, steps)
        done = first + (buckets - 1) * (second - first)
    for rank, links in enumerate(edges):
        until = int(done[(rank + 1) % ranks])
        for link in links:
            if until > table[link]:
                table[link] = until
    return done


def _children(index: int, ranks: int) -> list[int]:
    return [child for child in (2 * index + 1, 2 * index + 2) if child < ranks]


def tree_completions(
    fabric: dict[str, Any], entries: np.ndarray, chunk_bytes: list[int]
) -> tuple[np.ndarray, list[list[bool]]]:
    """Completions of the binary-heap tree all-reduce, and per chunk which nodes heard right first.

    Rank r's parent is (r-1)//2; each chunk goes up when a rank has entered and heard both
    children, then down from the root. ``right_first[c][r]`` is True when r's right child's sum of
    chunk c arrived before its left child's (what an arrival-order sum depends on).

    At 10,000 ranks that is 20,000 reservations a chunk, ~0.13 s a step in Python: the compiled
    core computes it (fabric/_speedups_tree.h, the same integer arithmetic) and hands back None for
    anything but plain ints that stay in int64, when :func:`tree_completions_python` runs.
    """
    compiled = speedups.compiled
    if compiled is not None:
        computed = compiled.tree_times(
            fabric["route"],
            fabric["link_busy_until_ns"],
            fabric["link_latency_ns"],
            fabric["link_bytes_per_s"],
            fabric["jitter_ns"] // 2,
            entries.tolist(),
            list(chunk_bytes),
        )
        if computed is not None:
            done, right_first = computed
            return np.array(done, dtype=np.int64), right_first
    return tree_completions_python(fabric, entries, chunk_bytes)


def tree_completions_python(
    fabric: dict[str, Any], entries: np.ndarray, chunk_bytes: list[int]
) -> tuple[np.ndarray, list[list[bool]]]:
    """:func:`tree_completions` in Python, written out: a parent's two children are taken in the
    order (heard time, rank) and the first to arrive wins ties by that order, as sorting them and
    taking the minimum would; :func:`tree_completions_reference` is the plain version, and
    tests/test_fabric_collective_tree.py compares all three."""
    ranks = entries.shape[0]
    links = _Links(fabric)
    send = _sender(fabric, links)
    entry = entries.tolist()
    done = [0] * ranks
    right_first: list[list[bool]] = []
    last_parent = (ranks - 2) // 2
    for nbytes in chunk_bytes:
        heard = list(entry)
        order = [False] * ranks
        for parent in range(last_parent, -1, -1):
            left = 2 * parent + 1
            right = left + 1
            if right < ranks:
                first, second = (right, left) if heard[right] < heard[left] else (left, right)
                arrival_first = send(first, parent, heard[first], nbytes)
                arrival_second = send(second, parent, heard[second], nbytes)
                latest = arrival_first if arrival_first > arrival_second else arrival_second
                if latest > heard[parent]:
                    heard[parent] = latest
                order[parent] = (second if arrival_second < arrival_first else first) % 2 == 0
            else:
                arrival = send(left, parent, heard[left], nbytes)
                if arrival > heard[parent]:
                    heard[parent] = arrival
        down = [0] * ranks
        down[0] = heard[0]
        for rank in range(last_parent + 1):
            left = 2 * rank + 1
            down[left] = send(rank, left, down[rank], nbytes)
            if left + 1 < ranks:
                down[left + 1] = send(rank, left + 1, down[rank], nbytes)
        done = [a if a > b else b for a, b in zip(done, down, strict=True)]
        right_first.append(order)
    links.commit()
    return np.array(done, dtype=np.int64), right_first


def _sender(fabric: dict[str, Any], links: _Links) -> Callable[[int, int, int, int], int]:
    """``send(source, destination, now, nbytes)``: ``links.reserve(path_links(fabric, source,
    destination), now, nbytes)`` in one call, the path's links and their reservation written out
    (the same arithmetic, link by link in the same order)."""
    ranks, gpus_per_host, ranks_per_leaf, spines, up_base, down_base = fabric["route"]
    busy = links.busy
    table = fabric["link_busy_until_ns"]
    latency = fabric["link_latency_ns"]
    bandwidth = fabric["link_bytes_per_s"]
    half_jitter = fabric["jitter_ns"] // 2

    def send(source: int, destination: int, now: int, nbytes: int) -> int:
        if source // gpus_per_host == destination // gpus_per_host:
            path: tuple[int, ...] = (source, ranks + destination)
        else:
            leaf_source = source // ranks_per_leaf
            leaf_destination = destination // ranks_per_leaf
            if leaf_source == leaf_destination:
                path = (2 * ranks + source, 3 * ranks + destination)
            else:
                spine = (source + destination) % spines
                path = (
                    2 * ranks + source,
                    up_base + leaf_source * spines + spine,
                    down_base + leaf_destination * spines + spine,
                    3 * ranks + destination,
                )
        scaled = nbytes * NS_PER_S
        head = now + half_jitter
        tail = 0
        for link in path:
            start = busy.get(link)
            if start is None:
                start = table[link]
            if head > start:
                start = head
            rate = bandwidth[link]
            end = start + (scaled + rate - 1) // rate
            if tail > end:
                end = tail
            busy[link] = end
            head = start + latency[link]
            tail = end + latency[link]
        return tail

    return send


def tree_completions_reference(
    fabric: dict[str, Any], entries: np.ndarray, chunk_bytes: list[int]
) -> tuple[np.ndarray, list[list[bool]]]:
    """:func:`tree_completions` as first written (sorted children, a minimum by key): the reference."""
    ranks = entries.shape[0]
    links = _Links(fabric)
    entry = entries.tolist()
    done = [0] * ranks
    right_first: list[list[bool]] = []
    for nbytes in chunk_bytes:
        heard = list(entry)
        order = [False] * ranks
        for parent in range((ranks - 2) // 2, -1, -1):
            children = _children(parent, ranks)
            children.sort(key=lambda child: (heard[child], child))
            arrivals = {}
            for child in children:
                arrivals[child] = links.reserve(path_links(fabric, child, parent), heard[child], nbytes)
                if arrivals[child] > heard[parent]:
                    heard[parent] = arrivals[child]
            if len(children) == 2:
                first = min(children, key=lambda child: (arrivals[child], children.index(child)))
                order[parent] = first % 2 == 0
        down = [0] * ranks
        down[0] = heard[0]
        for rank in range(ranks):
            for child in _children(rank, ranks):
                down[child] = links.reserve(path_links(fabric, rank, child), down[rank], nbytes)
        done = [max(a, b) for a, b in zip(done, down, strict=True)]
        right_first.append(order)
    links.commit()
    return np.array(done, dtype=np.int64), right_first


def star_completions(
    fabric: dict[str, Any], entries: np.ndarray, nbytes: int
) -> tuple[np.ndarray, list[int]]:
    """The parameter server (rank 0): completions, and the order the server heard the others in."""
    ranks = entries.shape[0]
    links = _Links(fabric)
    entry = entries.tolist()
    senders = sorted(range(1, ranks), key=lambda rank: (entry[rank], rank))
    arrivals = {rank: links.reserve(path_links(fabric, rank, 0), entry[rank], nbytes) for rank in senders}
    order = sorted(senders, key=lambda rank: (arrivals[rank], senders.index(rank)))
    ready = max([entry[0], *arrivals.values()])
    done = [ready] * ranks
    for rank in range(1, ranks):
        done[rank] = links.reserve(path_links(fabric, 0, rank), ready, nbytes)
    links.commit()
    return np.array(done, dtype=np.int64), order
