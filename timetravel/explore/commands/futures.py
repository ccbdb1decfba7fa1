"""The commands that run alternate futures and compare runs: branch, fanout, likelihood, compare,
diff, divergence, rerun.

Each handler turns the invocation's typed values into one engine call (:mod:`..branching`,
:mod:`..fanout`, :mod:`..compare`, :mod:`..divergence`, :mod:`..rerun`) with the context's
``progress`` and ``should_stop``, and returns the engine's result dataclass. A moment left out
(``branch`` without ``--at``) is the cursor. Input the engine cannot act on (an unknown branch or
fault, a time past the end, a key that is not branchable) becomes a one-line CommandError.
Importing this module registers the handlers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from timetravel.explore import branching, compare, divergence, fanout, reference, rerun
from timetravel.explore.commands.parse import CommandError, Invocation, Moment
from timetravel.explore.commands.run import CommandContext, Handler, register_handler
from timetravel.explore.compare_results import CompareResult
from timetravel.explore.work import ExploreError, WorkStopped
from timetravel.sim.scenario import ConfigError


def _moment(value: Moment | None) -> int | str | None:
    """A parsed moment as ``goto`` text; None stays None: the cursor (the engine forks from it)."""
    if value is None:
        return None
    return f"#{value.event}" if value.event is not None else int(value.t_ns or 0)


def _time(value: Moment | None) -> int | None:
    """A ``--from``/``--to`` moment as a time (an event number is not a window bound)."""
    if value is None:
        return None
    if value.t_ns is None:
        raise CommandError("likelihood: --from and --to take times, not event numbers")
    return value.t_ns


def _work(context: CommandContext) -> dict[str, Any]:
    return {"progress": context.progress, "should_stop": context.should_stop}


def _branch(invocation: Invocation, context: CommandContext) -> Any:
    session = context.require_session("branch")
    parent = invocation.value("from")
    changes = branching.BranchChanges(
        branch_key=invocation.value("branch_seed"),
        drop_faults=tuple(invocation.value("drop_fault", [])),
        add_faults=tuple(invocation.value("add_fault", [])),
        edit_faults=tuple(invocation.value("edit_fault", [])),
        settings=tuple(invocation.value("set", [])),
    )
    at = _moment(invocation.value("at"))
    return branching.branch(
        session, at, changes, name=invocation.value("name"), parent=parent, **_work(context)
    )


def _fanout(invocation: Invocation, context: CommandContext) -> Any:
    session = context.require_session("fanout")
    parent = invocation.value("branch")
    return fanout.fanout(
        session,
        _moment(invocation.value("at")),
        invocation.value("samples", fanout.SAMPLES_DEFAULT),
        parent=parent,
        store=bool(invocation.value("keep", False)),
        **_work(context),
    )


def _likelihood(invocation: Invocation, context: CommandContext) -> Any:
    session = context.require_session("likelihood")
    return fanout.likelihood(
        session,
        invocation.value("samples", fanout.LIKELIHOOD_SAMPLES_DEFAULT),
        parent=invocation.value("branch"),
        points_max=invocation.value("points", fanout.LIKELIHOOD_POINTS_MAX),
        start=_time(invocation.value("from")),
        end=_time(invocation.value("to")),
        **_work(context),
    )


def _compare(invocation: Invocation, context: CommandContext) -> Any:
    """Compare two branches; with ``--reference FILE`` lay a real run's losses over both (the file
    is read, and refused when malformed, before the divergence search runs)."""
    session = context.require_session("compare")
    a, b = invocation.value("a"), invocation.value("b")
    options = {key: invocation.value(key) for key in ("rtol", "reference_metric", "reference_node")}
    path = invocation.value("reference")
    if path is None:
        given = [f"--{key.replace('_', '-')}" for key, value in options.items() if value is not None]
        if given:
            raise CommandError(f"compare: {', '.join(given)} need --reference FILE")
        return compare.compare(session, a, b, **_work(context))
    rtol = _rtol(options["rtol"]) if options["rtol"] is not None else reference.RTOL_DEFAULT
    rows = reference.load_reference(path)
    result = compare.compare(session, a, b, **_work(context))
    overlays = tuple(
        reference.overlay_branch(
            session,
            name,
            rows,
            rtol=rtol,
            metric=options["reference_metric"] or reference.METRIC_DEFAULT,
            node=options["reference_node"] or reference.NODE_DEFAULT,
        )
        for name in (a, b)
    )
    return dataclasses.replace(result, reference=overlays)


def _rtol(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CommandError(f"compare: --rtol takes a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise CommandError(f"compare: --rtol must be a finite number >= 0, got {text!r}")
    return value


def _diff(invocation: Invocation, context: CommandContext) -> Any:
    session = context.require_session("diff")
    return compare.diff(
        session,
        invocation.value("a"),
        invocation.value("b"),
        at=_moment(invocation.value("at")),
        path=invocation.value("path") or "",
        with_divergence=bool(invocation.value("first_divergence", False)),
        ops=bool(invocation.value("ops", False)),
        **_work(context),
    )


def _divergence(invocation: Invocation, context: CommandContext) -> Any:
    """The Divergence; when there is none, the two sides (a CompareResult without divergence)."""
    session = context.require_session("divergence")
    a, b = invocation.value("a"), invocation.value("b")
    found = divergence.first_divergence(session, a, b, **_work(context))
    if found is None:
        return CompareResult(compare.run_side(session, a), compare.run_side(session, b), None)
    if invocation.value("go"):
        _go(context, a, found.event_a if found.event_a is not None else None, found.t_ns)
    return found


def _go(context: CommandContext, branch: str, event: int | None, t_ns: int) -> None:
    """Move the cursor to the divergence on ``branch`` (switching the cursor's branch if needed):
    right after the diverging event, or just before its time when this branch has no such event."""
    session = context.switch_branch(branch, "divergence")
    if event is not None:
        session.goto_event(event)
    else:
        session.goto_time(max(t_ns - 1, 0))


def _rerun(invocation: Invocation, context: CommandContext) -> Any:
    session = context.require_session("rerun")
    return rerun.rerun(session, tuple(invocation.value("set", [])), **_work(context))


def _user_errors(name: str, handler: Handler) -> Handler:
    """Engine input errors become CommandError (``name: message``); a stop becomes one too."""

    def run(invocation: Invocation, context: CommandContext) -> Any:
        try:
            return handler(invocation, context)
        except (ExploreError, ConfigError) as error:
            raise CommandError(f"{name}: {error}") from None
        except WorkStopped as error:
            raise CommandError(f"{name}: stopped ({error})") from None

    return run


HANDLERS: dict[str, Callable[[Invocation, CommandContext], Any]] = {
    "branch": _branch,
    "fanout": _fanout,
    "likelihood": _likelihood,
    "compare": _compare,
    "diff": _diff,
    "divergence": _divergence,
    "rerun": _rerun,
}

for _name, _handler in HANDLERS.items():
    register_handler(_name, _user_errors(_name, _handler))
