"""``explain [BRANCH]``: from a failure back to its root cause, as a causal chain of events.

Built on value provenance (:mod:`.provenance`), so it needs nothing from the scenario's author:

1. **The detector.** The failing event is re-executed with its reads noted (the failure is recorded
   by the handler of the last event; a failure of the end-of-run checks has no event).
2. **Messages.** When the detector read nothing unusual of its own node (a monitor's tallies), the
   cause is what it was told: the event that scheduled it — a message's send, found by its
   ``seq`` — and so on back to the failure's node.
3. **The onset.** A value is *unusual* when it differs from the same key on every peer (the nodes
   of the same role) while the peers agree among themselves — the replica that drifted, the rank
   that skipped alone. On the failure's node, the keys that are unusual when it sent its message
   and stay so are followed back: the snapshots say in which window they became unusual, and one
   re-execution of that window, checking those keys after each of the node's events, names the
   event after which they stayed unusual (r3's lone skip).
4. **Inputs.** From each link, the unusual values its event read lead to the event that last wrote
   them (a reverse watchpoint), and that event's own unusual reads lead further back.
5. **Roots.** A ``fault`` event, or a fault whose hit count rose during an event (a message it
   corrupted, dropped or duplicated), ends in its fault record: drawn from the seed or written by
   the user, it has no cause inside the simulation. So does an event scheduled when the world was
   built, and one whose inputs hold nothing unusual.

On a torch run the answer ends at the rank, the optimizer step, its batch's sampler indices and the
first module whose output or gradient went non-finite (:mod:`.explain_torch`, ``site``).

Everything is bounded (links, traced events); a chain cut by its budget says so (``complete``).
The peer rule is a heuristic: it is sharp for replicated systems (data-parallel ranks, replicas of
a state machine) and silent where nodes have no peers; there the chain follows messages alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from timetravel.explore.elided_values import reads_values
from timetravel.explore.explain_chain import ChainBudgetSpent, ChainReached, Explainer
from timetravel.explore.explain_results import (
    LINK_MESSAGE,
    ExplainLink,
    ExplainResult,
)
from timetravel.explore.explain_text import (
    NAN_CALL_TEXT,
)
from timetravel.explore.explain_torch import (
    execution_refusal,
    failure_site,
    is_torch,
)
from timetravel.explore.recorded_failure import recorded_failure
from timetravel.explore.session import Session
from timetravel.explore.tracks import check_branch, track_on
from timetravel.explore.work import ExploreError, ProgressCallback, StopCheck


def _at_the_rank_s_call(failure: dict[str, Any]) -> Callable[[ExplainLink], ExplainLink | None]:
    """On a torch ``nan`` failure the chain ends at the failing rank's call that fed the values: what
    led the rank's process there is its own step (the failure site: step, batch, module), not the
    World's counters that the peer rule would follow (its ``calls``, unlike its peers')."""

    def stop_at(link: ExplainLink) -> ExplainLink | None:
        if failure.get("kind") != "nan" or link.role != LINK_MESSAGE or link.node != failure.get("node"):
            return None
        what = f"{NAN_CALL_TEXT}: they were made in {link.node}'s own step (below)"
        return dataclasses.replace(link, what=what, because="")

    return stop_at


STORED_CHAIN_NOTE = (
    "read from the recording: with --script PATH, explain re-executes the run and shows the events "
    "between the failure and this"
)


def _stored_fault_links(track: Session, failure: dict[str, Any]) -> tuple[ExplainLink, ...]:
    """Without ``--script``: the fault whose hit explains a torch failure, its event and collective
    read from the recording (or the line saying no fault does); the links between the failure and
    that event need the re-execution, and the first link says so."""
    explainer = Explainer(track, None, None)
    explainer.torch = True
    explainer.torch_faults(failure, executes=False)
    links = list(explainer.links)
    if links:
        links[0] = dataclasses.replace(links[0], otherwise=STORED_CHAIN_NOTE)
    return tuple(links)


@reads_values
def explain(
    session: Session,
    branch: str | None = None,
    *,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
) -> ExplainResult:
    """The causal chain of ``branch``'s failure (default: the cursor's branch); see the module docstring."""
    name = check_branch(session.reader, branch or session.branch)
    end = session.reader.end(name) or {}
    failure = end.get("failure")
    if not isinstance(failure, dict):
        return ExplainResult(name, None, ())
    # the track shares the session's reader, but its world source is its own: a torch source left
    # open kept its checkpoints alive after the session closed
    with track_on(session, name) as track:
        return _explain_track(track, name, recorded_failure(track, failure) or failure, progress, should_stop)


def _explain_track(
    track: Session,
    name: str,
    failure: dict[str, Any],
    progress: ProgressCallback | None,
    should_stop: StopCheck | None,
) -> ExplainResult:
    refusal = execution_refusal(track) if is_torch(track) else None
    if refusal is not None:
        # nothing re-executes without --script: the stored recording's answer, and what to pass
        site = failure_site(track, failure)
        if site is None:  # a failure of no rank: nothing stored to tell
            raise ExploreError(refusal)
        return ExplainResult(name, dict(failure), _stored_fault_links(track, failure), 0, True, site)
    explainer = Explainer(track, progress, should_stop)
    if is_torch(track):
        explainer.stop_at = _at_the_rank_s_call(failure)
        explainer.torch = True
    try:
        if explainer.torch and failure.get("kind") != "nan":
            explainer.detector(failure)  # the peer rule would follow the ranks' call counters
        else:
            explainer.run(failure)
    except ChainBudgetSpent:
        explainer.complete = False
    except ChainReached:
        pass
    if explainer.torch and explainer.complete:
        explainer.stop_at = None
        try:
            explainer.torch_faults(failure)
        except ChainBudgetSpent:
            explainer.complete = False
    traced = len(explainer.traces) + explainer.counterfactuals
    site = failure_site(track, failure, progress) if is_torch(track) else None
    return ExplainResult(name, dict(failure), tuple(explainer.links), traced, explainer.complete, site)


__all__ = ["explain"]
