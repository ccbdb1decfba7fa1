"""The fabric's config keys: the ``Param``s a scenario includes to expose the hardware and faults.

A scenario puts ``*fabric_params()`` into its own ``params`` so that ``--set nic_gbit_per_s=200`` or
``--set faults=swarm`` work on it, and may change a default for its own needs with keyword
arguments: ``fabric_params(faults_window=2_000_000_000)``. The fabric reads these keys from the
world's config when it is installed (:func:`fabric_settings` fills in a default for any key the
scenario left out), so a scenario never copies them by hand.

Defaults come from real hardware; docs/fabric.md gives the source of each:

* ``nvlink_latency`` 3.4 us and ``network_latency`` 9.6 us: NCCL's own tuning model
  (src/graph/tuning.cc, ``hwLat``, ring algorithm, Simple protocol), the cost of one ring step
  over NVLink and over the network.
* ``uplink_latency`` 450 ns a leaf-spine link: about 330 ns port-to-port in an NDR switch plus
  ~100 ns of cable (20 m at 5 ns/m); a detour through a spine crosses two of them.
* ``nvlink_gbyte_per_s`` 450: H100 NVLink 4 gives 900 GB/s per GPU, 450 GB/s each way.
* ``nic_gbit_per_s`` / ``uplink_gbit_per_s`` 400: one 400 Gb/s NIC per GPU (ConnectX-7), 400 Gb/s
  switch ports; ``leaf_radix`` 64 is a 64-port NDR switch (Quantum-2 QM9700).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from timetravel.fabric.topology import NS_PER_S, Topology, TopologyError, build_topology
from timetravel.sim.scenario import ConfigError, Param

BITS_PER_BYTE = 8
FAULTS_MAX_LIMIT = 10_000
"""The largest ``faults_max`` accepted (a schedule is drawn at t=0 and kept in the world)."""

FABRIC_PARAMS: tuple[Param, ...] = (
    Param("gpus_per_host", "int", 8, "GPUs per host, linked by NVLink through an NVSwitch", minimum=1),
    Param(
        "leaf_radix",
        "int",
        64,
        "ports per leaf switch (NIC ports plus uplinks, one to each spine)",
        minimum=2,
    ),
    Param(
        "oversubscription",
        "float",
        1.0,
        "leaf NIC ports per uplink port (1 = non-blocking Clos, 3 = 3:1 oversubscribed)",
        minimum=0.01,
    ),
    Param("nvlink_latency", "time", 3_400, "one NVLink hop GPU -> NVSwitch -> GPU (NCCL tuning model)"),
    Param(
        "network_latency",
        "time",
        9_600,
        "one network hop GPU -> NIC -> leaf -> NIC -> GPU (NCCL tuning model)",
    ),
    Param("uplink_latency", "time", 450, "each leaf<->spine link, switch port-to-port plus cable"),
    Param("nvlink_gbyte_per_s", "int", 450, "NVLink bandwidth per GPU per direction, GB/s", minimum=1),
    Param("nic_gbit_per_s", "int", 400, "NIC bandwidth per GPU per direction, Gb/s", minimum=1),
    Param("uplink_gbit_per_s", "int", 400, "leaf<->spine link bandwidth per direction, Gb/s", minimum=1),
    Param(
        "network_jitter",
        "time",
        500,
        "extra send delay per message, drawn in [0, jitter] at choice site fabric.jitter (0: off)",
    ),
    Param("control_latency", "time", 10_000, "one-way latency for nodes that are not ranks (no congestion)"),
    Param(
        "race_detector",
        "bool",
        True,
        "fail with kind race when two GPU streams touch a buffer with no ordering edge (off: let it bite)",
    ),
    Param(
        "faults",
        "json",
        "none",
        "fault schedule: none, swarm, a JSON list of fault records, or @file.json (docs/fabric.md)",
    ),
    Param("faults_max", "int", 8, "swarm: at most this many fault records, drawn at t=0", minimum=0),
    Param(
        "faults_window", "time", NS_PER_S, "swarm: faults start in [faults_from, faults_window)", minimum=1
    ),
    Param(
        "faults_from",
        "time",
        0,
        "swarm: the earliest time a fault starts (a window late in a run aims the faults there)",
        minimum=0,
    ),
    Param(
        "faults_kinds",
        "str",
        "all",
        "swarm: comma-separated fault kinds the seed may enable (all: every kind the scenario survives)",
    ),
)
FABRIC_PARAM_NAMES = tuple(param.name for param in FABRIC_PARAMS)


def fabric_params(**defaults: Any) -> tuple[Param, ...]:
    """The fabric's Params, with some defaults replaced: ``fabric_params(gpus_per_host=4)``."""
    unknown = sorted(set(defaults) - set(FABRIC_PARAM_NAMES))
    if unknown:
        raise ValueError(
            f"not fabric config keys: {', '.join(unknown)} (known: {', '.join(FABRIC_PARAM_NAMES)})"
        )
    params = []
    for param in FABRIC_PARAMS:
        if param.name in defaults:
            param = dataclasses.replace(param, default=param.check(defaults[param.name]))
        params.append(param)
    return tuple(params)


def fabric_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The fabric's keys from a scenario config, each checked, with the default for any missing key."""
    settings = {}
    for param in FABRIC_PARAMS:
        settings[param.name] = param.check(config[param.name]) if param.name in config else param.default
    if settings["faults_max"] > FAULTS_MAX_LIMIT:
        raise ConfigError(
            f"config key 'faults_max': {settings['faults_max']} is above the limit {FAULTS_MAX_LIMIT}"
        )
    if settings["faults_from"] >= settings["faults_window"]:
        raise ConfigError(
            f"config key 'faults_from': {settings['faults_from']} ns is not before faults_window "
            f"({settings['faults_window']} ns)"
        )
    return settings


def topology_from_settings(ranks: int, settings: Mapping[str, Any]) -> Topology:
    """Build the cluster for ``ranks`` GPUs; a setting that cannot be built is a ConfigError."""
    try:
        return build_topology(
            ranks,
            gpus_per_host=settings["gpus_per_host"],
            leaf_radix=settings["leaf_radix"],
            oversubscription=settings["oversubscription"],
            nvlink_latency_ns=settings["nvlink_latency"],
            network_latency_ns=settings["network_latency"],
            uplink_latency_ns=settings["uplink_latency"],
            nvlink_bytes_per_s=settings["nvlink_gbyte_per_s"] * NS_PER_S,
            nic_bytes_per_s=settings["nic_gbit_per_s"] * NS_PER_S // BITS_PER_BYTE,
            uplink_bytes_per_s=settings["uplink_gbit_per_s"] * NS_PER_S // BITS_PER_BYTE,
        )
    except TopologyError as error:
        raise ConfigError(f"fabric: {error}") from None
