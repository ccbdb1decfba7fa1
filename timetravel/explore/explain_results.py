"""The results of ``origin`` and ``explain``: plain frozen dataclasses with ``to_data()`` (the JSON).

Kept beside :mod:`.results` (not in it) so the causal-explanation work stays one small module set:
:mod:`.provenance` (origin), :mod:`.explain` (the chain) and these records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from timetravel.explore.compare_results import DiffEntry
from timetravel.explore.results import public_failure

StateChange = DiffEntry
"""One change an event made: a path, the change kind and a one-line summary (old -> new) — the same
record a diff lists, so the front ends render both alike."""


@dataclass(frozen=True)
class ReadValue:
    """A state value an event read, as it was just before the event."""

    path: str
    value: str

    def to_data(self) -> dict[str, Any]:
        return {"path": self.path, "value": self.value}


@dataclass(frozen=True)
class OriginResult:
    """``origin PATH --at T``: the event that last wrote the value, and from what."""

    path: str
    branch: str
    at_ns: int
    event: int | None
    """The writing event's number; None: the value is as the world was built."""
    t_ns: int = 0
    node: str = ""
    kind: str = ""
    changes: tuple[StateChange, ...] = ()
    reads: tuple[ReadValue, ...] = ()
    """What the writing event read (its inputs), before it ran."""
    caused_by: int | None = None
    """The event that scheduled the writing event (a message's send, a timer's arming); None: build."""
    faults_hit: tuple[str, ...] = ()
    log: tuple[str, ...] = ()

    def to_data(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "branch": self.branch,
            "at_ns": self.at_ns,
            "event": self.event,
            "t_ns": self.t_ns,
            "node": self.node,
            "kind": self.kind,
            "changes": [change.to_data() for change in self.changes],
            "reads": [read.to_data() for read in self.reads],
            "caused_by": self.caused_by,
            "faults_hit": list(self.faults_hit),
            "log": list(self.log),
        }


LINK_DETECTOR = "detector"
"""The event whose handler recorded the failure."""
LINK_MESSAGE = "message"
"""The event that sent (scheduled) the next link's event."""
LINK_WRITE = "write"
"""The event that wrote a value a later link read (the value became unlike its peers' here)."""
LINK_FAULT = "fault"
"""A fault acting: its event, or the fault record it comes from."""
LINK_ROOT = "root"
"""A cause outside the simulation: a fault record of the schedule, or choices drawn from the seed."""
LINK_KINDS = (LINK_DETECTOR, LINK_MESSAGE, LINK_WRITE, LINK_FAULT, LINK_ROOT)


@dataclass(frozen=True)
class ExplainLink:
    """One link of the causal chain: an event (or a record with no event) and why it is here."""

    role: str
    """One of LINK_KINDS."""
    event: int | None
    t_ns: int | None
    node: str
    kind: str
    what: str
    """One line: what happened here, in words (``skipped the step alone``, ``fault f2 flipped ...``)."""
    changes: tuple[StateChange, ...] = ()
    because: str = ""
    """Why the previous link follows from this one (``read nodes/r3/skip_local``, ``sent observe``)."""
    otherwise: str = ""
    """The counterfactual: what the event writes when it reads its peers' value instead
    (``with its peers' skip_local (False): skipped_steps 0``); empty when not checked."""
    fault: dict[str, Any] | None = None
    """On a fault link of a torch run: the fault and the collective its hit was in (``id``,
    ``kind``, ``target``, ``t_ns``, ``op``, ``collective``, ``group``, ``seq``, ``hit``: its log line)."""

    def to_data(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "event": self.event,
            "t_ns": self.t_ns,
            "node": self.node,
            "kind": self.kind,
            "what": self.what,
            "changes": [change.to_data() for change in self.changes],
            "because": self.because,
            "otherwise": self.otherwise,
            "fault": dict(self.fault) if self.fault is not None else None,
        }


@dataclass(frozen=True)
class ExplainResult:
    """``explain [BRANCH]``: the failure, then its causes, from the detector back to the root."""

    branch: str
    failure: dict[str, Any] | None
    links: tuple[ExplainLink, ...]
    traced_events: int = 0
    """Events re-executed one by one with their reads noted (the explanation's cost)."""
    complete: bool = True
    """False when the chain stopped on its budget before reaching a cause outside the simulation."""
    site: FailureSite | None = None
    """On a torch run: the rank, step, sampler indices and first non-finite module it ends at."""

    def to_data(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "failure": public_failure(self.failure),
            "links": [link.to_data() for link in self.links],
            "traced_events": self.traced_events,
            "complete": self.complete,
            "site": self.site.to_data() if self.site is not None else None,
        }


PROBE_FOUND = "found"
"""The module probe ran and names the first module whose output or gradient went non-finite."""
PROBE_FINITE = "finite"
"""The probe ran: every module output and gradient of the step was finite up to the failure."""
PROBE_NOT_RUN = "not_run"
"""The probe could not run here (no ``--script``, no torch): ``probe_note`` says what to pass."""


@dataclass(frozen=True)
class FailureSite:
    """Where a torch run's failure stands in the user's terms (explore/explain_torch.py): the rank,
    the optimizer step it was in, that step's batch sampler indices, the first non-finite module."""

    rank: str
    step: int
    """The optimizer step in progress on ``rank`` (1 for the first; ``step - 1`` had completed)."""
    indices: tuple[int, ...] | None
    """The sampler indices of the step's DataLoader batches (None: none recorded, see the note)."""
    indices_note: str
    batches: int
    probe: str
    """One of PROBE_FOUND, PROBE_FINITE, PROBE_NOT_RUN."""
    probe_note: str = ""
    module: dict[str, Any] | None = None
    probe_from: int | None = None
    """The event the module probe re-executed from (a snapshot before the step, or 0); None: not run."""
    """The finding: ``module`` (name from the outermost module, '' for it), ``module_class``,
    ``where`` (``forward``: an output; ``gradient``: the gradient of an output), ``tensor`` (which
    output), ``nonfinite``/``elements``, ``first_index`` (flat), ``value``, ``shape``, ``dtype`` and
    ``inputs_nonfinite`` (the module's inputs that were non-finite already)."""
    uninitialised: dict[str, Any] | None = None
    """What the watch of uninitialised memory found when the probe re-executed the rank from the start
    (torch/rank/init_watch.py): ``report`` (at the rank's first forward: ``parameters``,
    ``uninitialised`` [{name, shape, local_shape, dtype, elements, uninitialised, nan, origin: {op,
    how, site}}], ``uninitialised_count``, ``materialised`` (to_empty call sites),
    ``last_init`` {op, site, parameter}, ``deterministic_fill``, ``broken``) and ``collective`` (the
    first non-finite collective input mapped to parameters: op, group, seq, tensor, shape, how,
    segments [{name, start, elements, nonfinite}]); None when it did not run."""

    def to_data(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "step": self.step,
            "indices": list(self.indices) if self.indices is not None else None,
            "indices_note": self.indices_note,
            "batches": self.batches,
            "probe": self.probe,
            "probe_note": self.probe_note,
            "module": dict(self.module) if self.module is not None else None,
            "probe_from": self.probe_from,
            "uninitialised": self.uninitialised,
        }
