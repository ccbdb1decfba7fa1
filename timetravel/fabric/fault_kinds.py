"""The fabric's fault kinds, each declared once: its parameters, what a correct system does with it,
how a swarm draws it, where it acts and how a front end shows its target.

Every other module reads this table instead of keeping a list of kinds of its own: schedule.py checks
records against ``params``, swarm.py draws ``swarm_span`` and ``swarm_levels``, collective.py folds the
kinds marked ``folded`` into a whole collective, and a scenario that installs the fabric hands
``VIEW_STATES`` to the TUI (``Scenario.view``). What a kind *does* is code where it acts: the send path
(network.py) for a fault on messages, faults.py for a node's crash or slowness and a buffer's bit flip,
collective.py for the same faults folded into one collective. Adding a kind is its declaration here
and its effect there (docs/fabric.md, "Adding a fault kind").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SURVIVABLE = "survivable"
DETECTABLE = "detectable"
FATAL = "fatal"
PROBABILITY_LEVELS = (0.01, 0.05, 0.2, 1.0)
"""A swarm's chance that a message fault hits a matching message."""
ParamSpecs = Mapping[str, tuple[str, Any]]
"""Parameter name -> (checker, default); schedule.py's checkers, docs/fabric.md explains each."""


@dataclass(frozen=True)
class Level:
    """One swarm draw: parameter ``param`` takes one of ``values``, drawn at choice site ``site``."""

    param: str
    site: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class FaultKind:
    """One kind of the fabric's fault model (see the module docstring)."""

    name: str
    params: ParamSpecs
    """Its parameters, in the order a record lists them."""
    expected: str
    """What a correct system does with it (DESIGN.md): the oracle's contract, said to a person."""
    swarm_span: tuple[int, int]
    """How long a swarm's record of this kind lasts, in thousandths of ``faults_window`` (low, high)."""
    swarm_levels: tuple[Level, ...] = ()
    """The swarm's draws of its parameters, in the order they are drawn (the choices' order)."""
    detectable: bool = False
    """A correct system notices it (rather than surviving it)."""
    fatal_unhealed: bool = False
    """Fatal when it never ends (``t_end`` null)."""
    needs_restart: bool = False
    """Survivable only where the scenario restarts a node."""
    on_messages: bool = False
    """A rule on the messages sent while it is active (dropped, copied, delayed...)."""
    folded: bool = False
    """Folded into a whole collective where the fabric models collectives, not messages."""
    shows_as: str = ""
    """The condition a front end shows its target in while it is active ("" : none of its own)."""


def _message_params(**extra: tuple[str, Any]) -> dict[str, tuple[str, Any]]:
    return {
        "direction": ("direction_out", "out"),
        "peer": ("node_or_none", None),
        "kinds": ("strings_or_none", None),
        "probability": ("probability", 1.0),
        "count": ("count_or_none", None),
        **extra,
    }


def _message_kind(name: str, expected: str, *levels: Level, **extra: tuple[str, Any]) -> FaultKind:
    """A fault on messages: a ``probability`` per matching message, at most ``count`` of them."""
    probability = Level("probability", f"fault.swarm.{name}.probability", PROBABILITY_LEVELS)
    return FaultKind(
        name,
        _message_params(**extra),
        expected,
        (5, 100),
        (probability, *levels),
        on_messages=True,
        folded=True,
    )


KINDS: tuple[FaultKind, ...] = (
    FaultKind(
        "partition",
        {
            "nodes": ("nodes_or_none", None),
            "scope": ("scope", "node"),
            "peers": ("nodes_or_none", None),
            "direction": ("direction_both", "both"),
            "mode": ("mode", "drop"),
            "links": ("links_or_none", None),
            "spines": ("spines_or_none", None),
        },
        "survivable when it heals (t_end set) and the protocol retransmits or waits; fatal when it never heals",
        (1, 50),
        (
            Level("scope", "fault.swarm.partition.scope", ("node", "host")),
            Level("direction", "fault.swarm.partition.direction", ("both", "out", "in")),
            Level("mode", "fault.swarm.partition.mode", ("hold", "drop")),
        ),
        fatal_unhealed=True,
        on_messages=True,
        folded=True,
        shows_as="partitioned",
    ),
    FaultKind(
        "slow",
        {"bandwidth_factor": ("fraction", 0.25), "compute_factor": ("factor", 4.0)},
        "survivable: a straggler slows the job down but must not change its results",
        (20, 250),
        (
            Level("bandwidth_factor", "fault.swarm.slow.bandwidth", (0.5, 0.25, 0.1)),
            Level("compute_factor", "fault.swarm.slow.compute", (1.5, 2.0, 4.0)),
        ),
        shows_as="slow",
    ),
    FaultKind(
        "corrupt",
        {
            "buffer": ("string_or_none", None),
            "element": ("count_or_none", None),
            "bit": ("count_or_none", None),
            **_message_params(count=("count_or_none", 1)),
        },
        "detectable: a correct system notices the flipped bit (guard, checksum, replica comparison)",
        (5, 100),
        detectable=True,
        on_messages=True,
        folded=True,
    ),
    FaultKind(
        "crash",
        {},
        "survivable when the scenario restarts the node (t_end set, restart hook); fatal otherwise",
        (1, 20),
        fatal_unhealed=True,
        needs_restart=True,
    ),
    _message_kind("drop", "survivable when the protocol retransmits after a timeout"),
    _message_kind(
        "duplicate",
        "survivable when receivers ignore a message they already have",
        Level("gap_ns", "fault.swarm.duplicate.gap", (0, 1_000, 50_000)),
        gap_ns=("time", 1_000),
    ),
    _message_kind(
        "reorder",
        "survivable when receivers do not depend on arrival order",
        Level("window_ns", "fault.swarm.reorder.window", (10_000, 100_000)),
        window_ns=("time", 50_000),
    ),
    _message_kind(
        "delay",
        "survivable: only timing changes",
        Level("delay_ns", "fault.swarm.delay.delay", (10_000, 100_000, 1_000_000)),
        delay_ns=("time", 100_000),
    ),
)
BY_NAME: dict[str, FaultKind] = {kind.name: kind for kind in KINDS}
FAULT_KINDS: tuple[str, ...] = tuple(BY_NAME)
EXPECTED_OUTCOMES: dict[str, str] = {kind.name: kind.expected for kind in KINDS}
PARAM_SPECS: dict[str, ParamSpecs] = {kind.name: kind.params for kind in KINDS}
FOLDED_KINDS: tuple[str, ...] = tuple(kind.name for kind in KINDS if kind.folded)
VIEW_STATES: dict[str, str] = {kind.name: kind.shows_as for kind in KINDS if kind.shows_as}
"""Fault kind -> the condition its target shows in while it is active (a scenario's ``view``)."""


def acts_once(record: Mapping[str, Any]) -> bool:
    """True for a record that acts once, at its start, on a node's buffer (a bit flip), rather than
    on messages for a while: it has a ``buffer`` parameter set."""
    return record["params"].get("buffer") is not None


def expected_outcome(record: Mapping[str, Any], restartable: bool) -> str:
    """``survivable``, ``detectable`` or ``fatal`` for one record in a scenario that can (or cannot)
    restart nodes."""
    declared = BY_NAME[record["kind"]]
    if declared.detectable:
        return DETECTABLE
    if declared.needs_restart and not restartable:
        return FATAL
    if declared.fatal_unhealed and record["t_end"] is None:
        return FATAL
    return SURVIVABLE
