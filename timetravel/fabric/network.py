"""The network: when (and whether) a message arrives. A scenario plugs :func:`transport` in as ``transport=``.

**Cut-through reservation.** A message's whole journey is computed when it is sent, so one delivery
is one event, not one per hop. Each link keeps the time it is busy until
(``world.fabric["link_busy_until_ns"]``). Walking the path, the head of the message reaches link i
at ``head`` and starts crossing it at ``start = max(head, busy_until[i])``; the tail leaves the link
at ``end = max(start + S / bandwidth_i, tail arriving from link i-1)``; the link is then busy until
``end``. The head reaches the next link ``latency_i`` after ``start`` and the tail ``latency_i``
after ``end``. Without other traffic the arrival is ``now + sum(latencies) + S / min(bandwidth)``;
with traffic, messages queue FIFO on each link in the order they were sent, so congestion (incast
on a NIC, two flows through one spine) is computed, not guessed. A reservation never goes into an
idle gap left before an earlier reservation (no backfilling): the simplification that makes it
O(path length).

**Why a list.** Link state is three Python lists of ints indexed by link id (busy-until, latency,
bandwidth) rather than numpy arrays: reading and writing one element of a list is several times
faster than of an array, and the result is a Python int, which the kernel's event times must be.

**Choices.** ``fabric.ecmp`` picks the spine of a message between leaves (per message, like packet
spraying or adaptive routing; value 0 is spine 0), and ``fabric.jitter`` delays the send by
``[0, network_jitter]`` ns. Both are drawn on the sender's streams, so one seed always gives the
same paths and a different seed reorders arrivals.

**Faults.** When any message fault is active (``world.fabric["message_rules"]`` non-empty) sends
take :func:`_send_with_faults`, which applies partitions, drops, duplicates, reorders, delays and
in-flight corruption (see faults.py for the records). The common case pays one dict lookup for it.
Each fault draws on sites of its own (``fault.f7.drop``: schedule.fault_site), every matching rule
draws its coin before any is applied, and the jitter is drawn first: so a send draws the same
jitter, and a fault the same coins, whatever another fault does to the message, and removing one
fault (a minimizer's move) never changes what another one does.

Nodes that are not ranks (a coordinator, a storage node) talk over a control network of fixed
``control_latency`` with no congestion.
"""

from __future__ import annotations

from heapq import heappush
from typing import TYPE_CHECKING, Any

import numpy as np

from timetravel.fabric.schedule import fault_site
from timetravel.fabric.topology import NS_PER_S
from timetravel.sim.event import Event, make_event

if TYPE_CHECKING:
    from timetravel.sim.context import Context

HELD_KIND = "fabric.held"
"""Event kind of a message held by a partition: it returns to its sender when the partition heals."""
SITE_ECMP = "fabric.ecmp"
SITE_JITTER = "fabric.jitter"
PAYLOAD_DEPTH_MAX = 4
"""How deep in a payload (lists, dicts) in-flight corruption looks for a numpy array or bytes."""


def transport(ctx: Context, dst: str, kind: str, payload: Any, nbytes: int) -> None:
    """``Scenario(transport=transport)``: route the message over the fabric and schedule its arrival.

    The reservation of :func:`reserve`, unrolled for speed: the first link, zero or two uplinks,
    the last link; then the arrival is pushed onto the queue directly (its time is an int >= now
    by construction, so ``ctx.deliver``'s checks would be wasted).
    """
    fabric = ctx.world.fabric
    if fabric["message_rules"]:
        _send_with_faults(ctx, fabric, dst, kind, payload, nbytes)
        return
    now = ctx.now
    jitter_ns = fabric["jitter_ns"]
    if jitter_ns:
        now += ctx.choose(SITE_JITTER, jitter_ns + 1)
    rank_of = fabric["rank_of"]
    try:
        source = rank_of[ctx.node]
        destination = rank_of[dst]
    except KeyError:
        ctx.deliver(now + fabric["control_latency_ns"], dst, kind, payload)
        return
    ranks, gpus_per_host, ranks_per_leaf, spines, up_base, down_base = fabric["route"]
    middle: tuple[int, ...] = ()
    if source // gpus_per_host == destination // gpus_per_host:
        if source == destination:
            ctx.deliver(now, dst, kind, payload)
            return
        first = source
        last = ranks + destination
    else:
        first = 2 * ranks + source
        last = 3 * ranks + destination
        leaf_source = source // ranks_per_leaf
        leaf_destination = destination // ranks_per_leaf
        if leaf_source != leaf_destination:
            spine = ctx.choose(SITE_ECMP, spines) if spines > 1 else 0
            middle = (up_base + leaf_source * spines + spine, down_base + leaf_destination * spines + spine)
    busy = fabric["link_busy_until_ns"]
    latency = fabric["link_latency_ns"]
    bandwidth = fabric["link_bytes_per_s"]
    scaled = nbytes * NS_PER_S
    start = busy[first]
    if start < now:
        start = now
    rate = bandwidth[first]
    end = start + (scaled + rate - 1) // rate
    busy[first] = end
    delay = latency[first]
    head = start + delay
    tail = end + delay
    for link in middle:
        start = busy[link]
        if start < head:
            start = head
        rate = bandwidth[link]
        end = start + (scaled + rate - 1) // rate
        if end < tail:
            end = tail
        busy[link] = end
        delay = latency[link]
        head = start + delay
        tail = end + delay
    start = busy[last]
    if start < head:
        start = head
    rate = bandwidth[last]
    end = start + (scaled + rate - 1) // rate
    if end < tail:
        end = tail
    busy[last] = end
    world = ctx.world
    seq = world.seq
    world.seq = seq + 1
    heappush(ctx.queue, make_event(Event, (end + latency[last], seq, dst, kind, payload)))


def reserve(fabric: dict[str, Any], links: list[int] | tuple[int, ...], now: int, nbytes: int) -> int:
    """Reserve ``links`` in order for a message of ``nbytes`` sent at ``now``; return its arrival time.

    The same arithmetic as the hot path in :func:`transport` (which inlines it), for the fault path,
    tests and tools.
    """
    busy = fabric["link_busy_until_ns"]
    latency = fabric["link_latency_ns"]
    bandwidth = fabric["link_bytes_per_s"]
    scaled = nbytes * NS_PER_S
    head = now
    tail = 0
    for link in links:
        start = max(busy[link], head)
        rate = bandwidth[link]
        end = max(start + (scaled + rate - 1) // rate, tail)
        busy[link] = end
        head = start + latency[link]
        tail = end + latency[link]
    return tail


# -- the fault path ------------------------------------------------------------------------------


def _send_with_faults(
    ctx: Context, fabric: dict[str, Any], dst: str, kind: str, payload: Any, nbytes: int
) -> None:
    """The send path while faults are active: the jitter; node partitions (a blocked message suffers
    nothing else); then every matching message fault draws its coin, and those that came up apply
    in activation order; then routing around cut links."""
    source_node = ctx.node
    rules = fabric["message_rules"]
    now = ctx.now
    jitter_ns = fabric["jitter_ns"]
    if jitter_ns:
        now += ctx.choose(SITE_JITTER, jitter_ns + 1)
    for rule in rules.values():
        if (
            rule["kind"] == "partition"
            and rule["cut_links"] is None
            and _partition_cuts(rule, source_node, dst)
        ):
            _block(ctx, rule, dst, kind, payload, nbytes)
            return
    extra_ns = 0
    copy_sites = [SITE_ECMP]  # a copy's path: the message's on the sender's stream, a duplicate's on its own
    gap_ns = 0
    hits = fabric["fault_hits"]
    fired: list[dict[str, Any]] = []
    for rule in rules.values():
        fault_kind = rule["kind"]
        if fault_kind == "partition" or not _rule_matches(rule, source_node, dst, kind):
            continue
        limit = rule["count"]
        if limit is not None and hits[rule["id"]] >= limit:
            continue
        if ctx.chance(fault_site(rule["id"], fault_kind), rule["probability"]):
            fired.append(rule)
    for rule in fired:
        fault_kind = rule["kind"]
        if fault_kind == "corrupt":
            corrupted = corrupt_payload(ctx, payload, rule)
            if corrupted is None:
                continue
            payload = corrupted
        hits[rule["id"]] += 1
        if fault_kind == "drop":
            ctx.log(f"fault {rule['id']}: dropped {kind} {source_node}->{dst}")
            return
        if fault_kind == "delay":
            extra_ns += rule["delay_ns"]
        elif fault_kind == "reorder":
            extra_ns += ctx.choose(fault_site(rule["id"], "reorder.delay"), rule["window_ns"] + 1)
        elif fault_kind == "duplicate":
            copy_sites.append(fault_site(rule["id"], "duplicate.ecmp"))
            gap_ns = rule["gap_ns"]
    for copy, ecmp_site in enumerate(copy_sites):
        arrival = _route_around_cuts(ctx, fabric, source_node, dst, now, nbytes, ecmp_site)
        if isinstance(arrival, dict):
            _block(ctx, arrival, dst, kind, payload, nbytes)
            return
        ctx.deliver(arrival + extra_ns + copy * gap_ns, dst, kind, payload)


def _route_around_cuts(
    ctx: Context, fabric: dict[str, Any], source_node: str, dst: str, now: int, nbytes: int, ecmp_site: str
) -> int | dict[str, Any]:
    """Arrival time of one copy, with ECMP avoiding cut spine links; the blocking rule when none is left."""
    rank_of = fabric["rank_of"]
    source = rank_of.get(source_node)
    destination = rank_of.get(dst)
    if source is None or destination is None:
        return now + fabric["control_latency_ns"]
    if source == destination:
        return now
    ranks, gpus_per_host, ranks_per_leaf, spines, up_base, down_base = fabric["route"]
    cut = fabric["links_down"]
    if source // gpus_per_host == destination // gpus_per_host:
        links = [source, ranks + destination]
    elif source // ranks_per_leaf == destination // ranks_per_leaf:
        links = [2 * ranks + source, 3 * ranks + destination]
    else:
        up = up_base + (source // ranks_per_leaf) * spines
        down = down_base + (destination // ranks_per_leaf) * spines
        alive = [k for k in range(spines) if str(up + k) not in cut and str(down + k) not in cut]
        if not alive:
            keys = [str(up + k) for k in range(spines)] + [str(down + k) for k in range(spines)]
            return _cutting_rule(fabric, keys)
        spine = alive[ctx.choose(ecmp_site, len(alive))] if len(alive) > 1 else alive[0]
        links = [2 * ranks + source, up + spine, down + spine, 3 * ranks + destination]
    for link in links:
        if str(link) in cut:
            return _cutting_rule(fabric, [str(link)])
    return reserve(fabric, links, now, nbytes)


def _cutting_rule(fabric: dict[str, Any], link_keys: list[str]) -> dict[str, Any]:
    """The partition rule that cut the first of ``link_keys`` that is down (the latest one to cut it)."""
    for key in link_keys:
        fault_ids = fabric["links_down"].get(key)
        if fault_ids:
            return fabric["message_rules"][fault_ids[-1]]
    raise AssertionError(f"no cut link among {link_keys}")


def _partition_cuts(rule: dict[str, Any], source: str, destination: str) -> bool:
    side = rule["side"]
    peers = rule["peers"]
    source_inside = source in side
    destination_inside = destination in side
    direction = rule["direction"]
    if source_inside and not destination_inside and direction != "in":
        return peers is None or destination in peers
    if destination_inside and not source_inside and direction != "out":
        return peers is None or source in peers
    return False


def _rule_matches(rule: dict[str, Any], source: str, destination: str, kind: str) -> bool:
    kinds = rule["kinds"]
    if kinds is not None and kind not in kinds:
        return False
    target = rule["target"]
    peer = rule["peer"]
    direction = rule["direction"]
    if direction != "in" and source == target and (peer is None or destination == peer):
        return True
    return direction != "out" and destination == target and (peer is None or source == peer)


def _block(ctx: Context, rule: dict[str, Any], dst: str, kind: str, payload: Any, nbytes: int) -> None:
    """A partition stops this message: drop it, or hold it until the partition heals."""
    fabric = ctx.world.fabric
    fabric["fault_hits"][rule["id"]] += 1
    heal_ns = rule["t_end_ns"]
    if rule["mode"] == "hold" and heal_ns is not None:
        ctx.deliver(max(heal_ns, ctx.now), ctx.node, HELD_KIND, [dst, kind, payload, nbytes])
        return
    ctx.log(f"fault {rule['id']}: partition dropped {kind} {ctx.node}->{dst}")


def on_held(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A held message comes back to its sender when its partition heals and is sent again."""
    dst, kind, payload, nbytes = event.payload
    transport(ctx, dst, kind, payload, nbytes)


# -- corruption ---------------------------------------------------------------------------------


def flip_bit(
    ctx: Context, array: np.ndarray, element: int | None, bit: int | None, fault_id: str
) -> tuple[int, int]:
    """Flip one bit of ``array`` in place; element and bit drawn by the fault's own choices
    (``fault.f7.corrupt.element``, ``…bit``) unless pinned. Returns them."""
    flat = array.reshape(-1)
    if element is None:
        element = ctx.choose(fault_site(fault_id, "corrupt.element"), flat.size)
    bits_per_element = array.dtype.itemsize * 8
    if bit is None:
        bit = ctx.choose(fault_site(fault_id, "corrupt.bit"), bits_per_element)
    element %= flat.size
    bit %= bits_per_element
    raw = flat[element : element + 1].view(np.uint8)
    raw[bit // 8] ^= np.uint8(1 << (bit % 8))
    return element, bit


def corrupt_payload(ctx: Context, payload: Any, rule: dict[str, Any]) -> Any:
    """A copy of ``payload`` with one bit flipped in its first numpy array (or bytes); None if it has neither."""
    if isinstance(payload, np.ndarray):
        if not _corruptible(payload):
            return None
        copy = np.array(payload, copy=True)
        flip_bit(ctx, copy, rule.get("element"), rule.get("bit"), rule["id"])
        copy.flags.writeable = False
        return copy
    if isinstance(payload, bytes):
        if not payload:
            return None
        array = np.frombuffer(payload, dtype=np.uint8).copy()
        flip_bit(ctx, array, rule.get("element"), rule.get("bit"), rule["id"])
        return array.tobytes()
    return _corrupt_container(ctx, payload, rule, PAYLOAD_DEPTH_MAX)


def _corruptible(array: np.ndarray) -> bool:
    """Numbers only: flipping a bit of a bool (or of an empty array) is not a silent corruption."""
    return array.size > 0 and (array.dtype.kind in "iufc" or array.dtype.name == "bfloat16")


def _corrupt_container(ctx: Context, payload: Any, rule: dict[str, Any], depth: int) -> Any:
    if depth <= 0:
        return None
    if isinstance(payload, (list, tuple)):
        for index, item in enumerate(payload):
            corrupted = _corrupt_item(ctx, item, rule, depth)
            if corrupted is not None:
                items = list(payload)
                items[index] = corrupted
                return items if isinstance(payload, list) else tuple(items)
    elif isinstance(payload, dict):
        for key, item in payload.items():
            corrupted = _corrupt_item(ctx, item, rule, depth)
            if corrupted is not None:
                return {**payload, key: corrupted}
    return None


def _corrupt_item(ctx: Context, item: Any, rule: dict[str, Any], depth: int) -> Any:
    if isinstance(item, (np.ndarray, bytes)):
        return corrupt_payload(ctx, item, rule)
    return _corrupt_container(ctx, item, rule, depth - 1)
