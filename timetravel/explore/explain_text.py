"""The words of an explain chain: one line per link, and the peer rule that says what is unusual.

Split from :mod:`.explain` so that the chain's search (the ``_Explainer``) reads apart from how each
link is put into words. The peer rule lives here too, because the texts quote it ("its 15 peers: 0")
and the search asks it: a value is *unusual* when it differs from the same key on every peer (the
nodes of the same role) while most peers agree among themselves.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from timetravel.explore.array_diff import differing_elements, elements_text, summarize_arrays
from timetravel.explore.diff import value_text
from timetravel.explore.explain_results import LINK_FAULT, ExplainLink, StateChange
from timetravel.explore.provenance import EventTrace
from timetravel.sim.encoding import digest

CHANGES_PER_LINK_MAX = 3
PEERS_MIN = 2
NAN_CALL_TEXT = "sent the call whose inputs held the non-finite values"
"""How a torch nan's chain names the failing rank's call (explain stops there: the rank's own step)."""


def fault_link(trace: EventTrace, what: str, *arguments: Any, **options: Any) -> ExplainLink:
    """The link of the event a fault acted in (``arguments``/``options``: ExplainLink's after ``what``)."""
    event = trace.event
    return ExplainLink(LINK_FAULT, trace.number, event.t, event.dst, event.kind, what, *arguments, **options)


SUMMARY_CHARS_MAX = 110
RECORD_PARAMS_DEFAULT: dict[str, Any] = {"probability": 1.0, "count": 1, "direction": "out"}
"""Fault params left out of a record's one line when they hold these (the usual) values."""


PAYLOAD_CHARS_MAX = 48


def clip(text: str, chars_max: int = SUMMARY_CHARS_MAX) -> str:
    return text if len(text) <= chars_max else text[: chars_max - 3] + "..."


def record_text(record: dict[str, Any]) -> str:
    params = {
        key: value
        for key, value in (record.get("params") or {}).items()
        if value is not None and RECORD_PARAMS_DEFAULT.get(key) != value
    }
    words = [str(record.get("kind", "?")), str(record.get("target", "?"))]
    words += [f"{key}={value}" for key, value in params.items()]
    return " ".join(words)


def link_changes(trace: EventTrace, flipped: bool = False) -> tuple[StateChange, ...]:
    """The changes a link shows: its node's, without bookkeeping; a flipped array by element."""
    node = trace.event.dst
    shown: list[StateChange] = []
    for change in trace.changes:
        parts = change.path.split("/")
        if len(parts) < 3 or parts[1] != node or parts[2].startswith("_"):
            continue
        summary = change.summary
        if flipped:
            summary = flip_text(trace, node, parts[2]) or summary
        shown.append(StateChange(change.path, change.change, clip(summary)))
        if len(shown) >= CHANGES_PER_LINK_MAX:
            break
    return tuple(shown)


def flip_text(trace: EventTrace, node: str, key: str) -> str:
    """A buffer a fault wrote, by element: ``[362] 0.0 -> 1.0842e-19 (bit 13)`` (None before: zeros)."""
    after = trace.after.get(node, {}).get(key)
    before = trace.before.get(node, {}).get(key)
    if not isinstance(after, np.ndarray):
        return ""
    if not isinstance(before, np.ndarray) or before.shape != after.shape or before.dtype != after.dtype:
        before = np.zeros_like(after)
    elements = differing_elements(before, after, 4)
    return f"flipped {elements_text(elements)}" if elements else ""


def read_text(trace: EventTrace, reads: list[tuple[str, str]]) -> str:
    words = []
    for node, key in reads[:3]:
        value = trace.before[node].get(key)
        peer = peer_value(trace.before, trace.roles, node, key)
        count = len(peers_of(trace.before, trace.roles, node, key))
        if isinstance(value, (bool, int, float, str, type(None))) and isinstance(
            peer, (bool, int, float, str, type(None))
        ):
            words.append(f"{node}/{key} = {short(value)} (its {count} peers: {short(peer)})")
        else:
            words.append(f"{node}/{key} {short(value)}, unlike all {count} peers'")
    return "read " + "; ".join(words) if words else ""


def counterfactual_text(actual: Any, instead: Any) -> str:
    """What a key would have held: the value, or for two arrays of one shape how many elements differ."""
    if (
        isinstance(actual, np.ndarray)
        and isinstance(instead, np.ndarray)
        and actual.shape == instead.shape
        and actual.dtype == instead.dtype
    ):
        return f"unlike this run's in {summarize_arrays(actual, instead).differing}/{actual.size} elements"
    return short(instead)


def short(value: Any) -> str:
    return value_text(value)


def peers_of(nodes: dict[str, Any], roles: dict[str, str], node: str, key: str) -> list[str]:
    role = roles.get(node)
    if role is None:
        return []
    return [
        name for name, other in roles.items() if other == role and name != node and key in nodes.get(name, {})
    ]


def unusual(nodes: dict[str, Any], roles: dict[str, str], node: str, key: str) -> bool:
    """``nodes[node][key]`` differs from every peer's while most peers agree (see the module docstring)."""
    if key.startswith("_") or node not in nodes or key not in nodes[node]:
        return False
    peers = peers_of(nodes, roles, node, key)
    if len(peers) < PEERS_MIN:
        return False
    mine = digest(nodes[node][key])
    counts: dict[bytes, int] = {}
    for peer in peers:
        value = digest(nodes[peer][key])
        if value == mine:
            return False
        counts[value] = counts.get(value, 0) + 1
    return max(counts.values()) * 2 > len(peers)


def peer_value(nodes: dict[str, Any], roles: dict[str, str], node: str, key: str) -> Any:
    peers = peers_of(nodes, roles, node, key)
    counts: dict[bytes, tuple[int, Any]] = {}
    for peer in peers:
        value = nodes[peer][key]
        key_digest = digest(value)
        count, _ = counts.get(key_digest, (0, value))
        counts[key_digest] = (count + 1, value)
    return max(counts.values(), key=lambda item: item[0])[1] if counts else None


def made_from_a_fault(link: ExplainLink) -> ExplainLink:
    """A nan's rank link once a fault explains it: the rank's step made the non-finite values (the site
    says where), but from values the fault corrupted — the step alone did not."""
    if not link.what.startswith(NAN_CALL_TEXT):
        return link
    what = (
        f"{NAN_CALL_TEXT}: {link.node}'s own step made them (below), from values the fault in the "
        "next link corrupted"
    )
    return dataclasses.replace(link, what=what)
