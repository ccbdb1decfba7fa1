"""The cluster's wiring: hosts x GPUs, NVLink inside a host, a two-level leaf-spine Clos between hosts.

Every GPU (a *rank*) has four links of its own, and the Clos adds two per (leaf, spine) pair:

* ``nvlink_out[r]`` / ``nvlink_in[r]``: rank r to and from its host's NVSwitch. A message between
  two GPUs of one host crosses ``nvlink_out[src]`` then ``nvlink_in[dst]`` (one NVLink hop).
* ``nic_out[r]`` / ``nic_in[r]``: rank r's NIC to and from its leaf switch. Every GPU has its own
  NIC, as in DGX/HGX H100 servers (8 GPUs, 8 x 400 Gb/s); every NIC of a host plugs into the same
  leaf (we do not model rail-optimized wiring).
* ``leaf_up[l][k]`` / ``spine_down[l][k]``: leaf l to spine k and back. Each leaf has one link to
  every spine, so ECMP picks a spine ``k`` for a message between leaves.

A path is therefore 2 links (same host, or two hosts under one leaf) or 4 links (across leaves).
Links are plain ints laid out in blocks so that a route is a few integer operations, not a table
lookup: with R ranks, L leaves and S spines, ``nvlink_out[r] = r``, ``nvlink_in[r] = R + r``,
``nic_out[r] = 2R + r``, ``nic_in[r] = 3R + r``, ``leaf_up[l][k] = 4R + l*S + k`` and
``spine_down[l][k] = 4R + L*S + l*S + k``. No route is ever stored per pair (at 10,000 ranks that
would be 10^8 entries).

Sizing a leaf: a leaf switch has ``leaf_radix`` ports; with oversubscription o (downlink to uplink
ratio, 1 = non-blocking) ``floor(radix * o / (1 + o))`` ports face NICs and the rest go up, one to
each spine. A leaf holds as many whole hosts as its NIC ports allow. Spines are not limited by a
radix: a cluster larger than one two-level Clos would be a three-level fabric in reality, which
this model flattens into one very wide spine layer (docs/fabric.md, "what the model leaves out").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NS_PER_S = 1_000_000_000
RANKS_MAX = 1_000_000
LINK_CLASSES = ("nvlink_out", "nvlink_in", "nic_out", "nic_in", "leaf_up", "spine_down")


class TopologyError(ValueError):
    """Settings that do not describe a buildable cluster; the message says which and why."""


@dataclass(frozen=True)
class Topology:
    """Sizes, per-class link figures and the link-id layout of one cluster (see the module docstring)."""

    ranks: int
    gpus_per_host: int
    hosts: int
    hosts_per_leaf: int
    ranks_per_leaf: int
    leaves: int
    spines: int
    nvlink_latency_ns: int
    network_latency_ns: int
    uplink_latency_ns: int
    nvlink_bytes_per_s: int
    nic_bytes_per_s: int
    uplink_bytes_per_s: int

    # -- link ids -------------------------------------------------------------------------------

    @property
    def link_count(self) -> int:
        return 4 * self.ranks + 2 * self.leaves * self.spines

    @property
    def leaf_up_base(self) -> int:
        return 4 * self.ranks

    @property
    def spine_down_base(self) -> int:
        return 4 * self.ranks + self.leaves * self.spines

    def rank_links(self, rank: int) -> list[int]:
        """The four links that belong to one GPU: NVLink out/in, NIC out/in."""
        ranks = self.ranks
        return [rank, ranks + rank, 2 * ranks + rank, 3 * ranks + rank]

    def host_of(self, rank: int) -> int:
        return rank // self.gpus_per_host

    def leaf_of(self, rank: int) -> int:
        return rank // self.ranks_per_leaf

    def crosses_spine(self, source: int, destination: int) -> bool:
        """True when a message between these ranks goes through a spine (so ECMP picks one)."""
        return (
            source // self.gpus_per_host != destination // self.gpus_per_host
            and source // self.ranks_per_leaf != destination // self.ranks_per_leaf
        )

    def path(self, source: int, destination: int, spine: int = 0) -> list[int]:
        """The links a message crosses, in order; ``spine`` matters only across leaves."""
        ranks = self.ranks
        if source // self.gpus_per_host == destination // self.gpus_per_host:
            return [source, ranks + destination]
        leaf_source = source // self.ranks_per_leaf
        leaf_destination = destination // self.ranks_per_leaf
        if leaf_source == leaf_destination:
            return [2 * ranks + source, 3 * ranks + destination]
        if not 0 <= spine < self.spines:
            raise ValueError(f"spine {spine} out of range [0, {self.spines})")
        return [
            2 * ranks + source,
            self.leaf_up_base + leaf_source * self.spines + spine,
            self.spine_down_base + leaf_destination * self.spines + spine,
            3 * ranks + destination,
        ]

    def link_class(self, link: int) -> tuple[str, int, int]:
        """``(class, first index, second index)`` of a link id: ``("leaf_up", leaf, spine)``, ``("nic_in", rank, 0)``."""
        if not 0 <= link < self.link_count:
            raise ValueError(f"link {link} out of range [0, {self.link_count})")
        ranks = self.ranks
        if link < 4 * ranks:
            return LINK_CLASSES[link // ranks], link % ranks, 0
        offset = link - self.leaf_up_base
        block = self.leaves * self.spines
        name = "leaf_up" if offset < block else "spine_down"
        leaf, spine = divmod(offset % block, self.spines)
        return name, leaf, spine

    def describe_link(self, link: int) -> str:
        """A link id as a person reads it: ``nic_out[r3]``, ``leaf_up[l0->s5]``."""
        name, first, second = self.link_class(link)
        if name == "leaf_up":
            return f"leaf_up[l{first}->s{second}]"
        if name == "spine_down":
            return f"spine_down[s{second}->l{first}]"
        return f"{name}[r{first}]"

    # -- per-link figures ------------------------------------------------------------------------

    def link_latency_ns(self, link: int) -> int:
        """One-way latency of a link. A hop's latency is split over its two links (out gets the floor half)."""
        name = self.link_class(link)[0]
        if name == "nvlink_out":
            return self.nvlink_latency_ns // 2
        if name == "nvlink_in":
            return self.nvlink_latency_ns - self.nvlink_latency_ns // 2
        if name == "nic_out":
            return self.network_latency_ns // 2
        if name == "nic_in":
            return self.network_latency_ns - self.network_latency_ns // 2
        return self.uplink_latency_ns

    def link_bytes_per_s(self, link: int) -> int:
        """Nominal bandwidth of a link (a slow-node fault scales a rank's own four links)."""
        name = self.link_class(link)[0]
        if name.startswith("nvlink"):
            return self.nvlink_bytes_per_s
        if name.startswith("nic"):
            return self.nic_bytes_per_s
        return self.uplink_bytes_per_s

    def latency_table(self) -> list[int]:
        ranks = self.ranks
        nvlink_out = self.nvlink_latency_ns // 2
        nic_out = self.network_latency_ns // 2
        return (
            [nvlink_out] * ranks
            + [self.nvlink_latency_ns - nvlink_out] * ranks
            + [nic_out] * ranks
            + [self.network_latency_ns - nic_out] * ranks
            + [self.uplink_latency_ns] * (2 * self.leaves * self.spines)
        )

    def bandwidth_table(self) -> list[int]:
        ranks = self.ranks
        return (
            [self.nvlink_bytes_per_s] * (2 * ranks)
            + [self.nic_bytes_per_s] * (2 * ranks)
            + [self.uplink_bytes_per_s] * (2 * self.leaves * self.spines)
        )

    def to_data(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Topology:
        return cls(**{name: int(data[name]) for name in cls.__dataclass_fields__})


def serialization_ns(nbytes: int, bytes_per_s: int) -> int:
    """Time to put ``nbytes`` on a link, rounded up to a whole nanosecond (never 0 for a non-empty message)."""
    return (nbytes * NS_PER_S + bytes_per_s - 1) // bytes_per_s


def build_topology(
    ranks: int,
    *,
    gpus_per_host: int,
    leaf_radix: int,
    oversubscription: float,
    nvlink_latency_ns: int,
    network_latency_ns: int,
    uplink_latency_ns: int,
    nvlink_bytes_per_s: int,
    nic_bytes_per_s: int,
    uplink_bytes_per_s: int,
) -> Topology:
    """Size the cluster for ``ranks`` GPUs (see the module docstring for the rules)."""
    if not 1 <= ranks <= RANKS_MAX:
        raise TopologyError(f"the fabric holds 1 to {RANKS_MAX} ranks, got {ranks}")
    if gpus_per_host < 1:
        raise TopologyError(f"gpus_per_host must be at least 1, got {gpus_per_host}")
    if leaf_radix < 2:
        raise TopologyError(f"leaf_radix must be at least 2, got {leaf_radix}")
    if not oversubscription > 0:
        raise TopologyError(f"oversubscription must be positive, got {oversubscription}")
    for name, value in (
        ("nvlink bandwidth", nvlink_bytes_per_s),
        ("nic bandwidth", nic_bytes_per_s),
        ("uplink bandwidth", uplink_bytes_per_s),
    ):
        if value < 1:
            raise TopologyError(f"{name} must be positive, got {value} bytes/s")
    for name, value in (
        ("nvlink_latency", nvlink_latency_ns),
        ("network_latency", network_latency_ns),
        ("uplink_latency", uplink_latency_ns),
    ):
        if value < 0:
            raise TopologyError(f"{name} must not be negative, got {value} ns")
    downlinks = min(leaf_radix - 1, max(1, int(leaf_radix * oversubscription / (1 + oversubscription))))
    uplinks = leaf_radix - downlinks
    hosts_per_leaf = downlinks // gpus_per_host
    if hosts_per_leaf < 1:
        raise TopologyError(
            f"a leaf of radix {leaf_radix} at oversubscription {oversubscription:g} has {downlinks} "
            f"NIC ports, fewer than gpus_per_host={gpus_per_host}: raise leaf_radix"
        )
    hosts = -(-ranks // gpus_per_host)
    ranks_per_leaf = hosts_per_leaf * gpus_per_host
    return Topology(
        ranks=ranks,
        gpus_per_host=gpus_per_host,
        hosts=hosts,
        hosts_per_leaf=hosts_per_leaf,
        ranks_per_leaf=ranks_per_leaf,
        leaves=-(-hosts // hosts_per_leaf),
        spines=uplinks,
        nvlink_latency_ns=nvlink_latency_ns,
        network_latency_ns=network_latency_ns,
        uplink_latency_ns=uplink_latency_ns,
        nvlink_bytes_per_s=nvlink_bytes_per_s,
        nic_bytes_per_s=nic_bytes_per_s,
        uplink_bytes_per_s=uplink_bytes_per_s,
    )
