"""The ``silent_corruption`` detector: a fault changed the training's result and nothing said so.

A bit flipped in one rank's contribution to a gradient all_reduce reaches every replica alike: they
agree with each other (``divergence`` sees nothing), nothing is NaN, nothing hangs — the run passes with
other weights. "Would my training stack have noticed?" is answered by comparing the run with the run it
should have been.

**The reference** (world/reference.py): the same script, seed, settings and fault schedule, in which
each ``corrupt`` fault still fires — the same collective, the same element and bit choices, the same
hit counts and log lines — but writes nothing (faults.py ``DRY_MARK``). The two runs keep one schedule,
so arrival order, timing and every other fault are the same in both: only the data the faults changed
can differ, never a false alarm from another order of arrivals. It is a second full run of the script,
paid only by a run in which a ``corrupt`` fault acted and that otherwise passed.

**What is compared.** Per rank, every optimizer step's parameter digests (the divergence detector's
digests; for FSDP2 / DTensor parameters, the rank's own shards), counted from the start of the run (so
a branch that adds a fault mid-run still aligns), with the steps' digests kept from the first hit of a
``corrupt`` fault on (:data:`SILENT_STEPS_MAX`; per tensor for the first :data:`SILENT_TENSOR_STEPS_MAX`).
When the final parameters of any rank differ from the reference's, the run fails ``silent_corruption``
naming the faults that fired, the first optimizer step whose parameters differ, its first tensor, the
ranks that differ, and the detectors that were on and stayed silent. When they are equal (a flip in a
value the model never used: a logged loss, a discarded broadcast input), the log says so and it passes.

Not checked (the log says why): a script that wrote outside its working directory (the reference would
read the run's files), a reference that failed, a run without an optimizer step.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim.context import Context
from timetravel.sim.world import World
from timetravel.torch.world import fault_causes
from timetravel.torch.world.faults import DRY_MARK
from timetravel.torch.world.reference import is_reference, reference_run
from timetravel.torch.world.resume import first_tensor, step_entry

SILENT_STEPS_MAX = 65_536
"""Optimizer steps kept per rank from the first corrupt hit on (each a digest); later ones are
counted and the last one's digest kept, so a difference at the end is still found."""
SILENT_TENSOR_STEPS_MAX = 64
"""Of those, the steps kept per tensor (to name the first differing tensor): a flip shows in the step
it hit or soon after."""
DETECTORS = (("nan", "detect_nan"), ("divergence", "detect_divergence"))
"""The detectors that could have noticed a corruption, with their settings."""
SITE = "torch.fault.silent_corruption"


def note_step(state: dict[str, Any], rank: str, params: list[Any], ctx: Context) -> None:
    """A rank's optimizer step (its ``(name, shape, dtype, digest)`` rows): counted, its digest kept as
    the rank's last, and kept in order once a corrupt fault acted."""
    if not ctx.world.config.get("detect_silent_corruption", True) or state.get("resume_reference"):
        return
    history = state.setdefault("silent", {}).setdefault(rank, {"count": 0, "last": "", "steps": []})
    history["count"] += 1
    steps = history["steps"]
    kept = len(steps) < SILENT_STEPS_MAX and (steps or _corrupt_acted(ctx.world))
    entry = step_entry(params, with_tensors=bool(kept) and len(steps) < SILENT_TENSOR_STEPS_MAX)
    history["last"] = entry["digest"]
    if not kept:
        return
    if not steps:
        history["from"] = history["count"] - 1  # the steps before the first kept one
    steps.append(entry)


def _corrupt_acted(world: World) -> bool:
    hits = world.fabric.get("fault_hits", {})
    return any(record["kind"] == "corrupt" and hits.get(record["id"]) for record in world.faults)


def check(world: World, ctx: Context) -> None:
    """At the end of a run that passed, in which a corrupt fault acted: compare with the reference."""
    state = world.nodes["c10d"]
    if world.failures or not world.config.get("detect_silent_corruption", True) or is_reference(state):
        return
    hits = world.fabric.get("fault_hits", {})
    fired = [record for record in world.faults if record["kind"] == "corrupt" and hits.get(record["id"])]
    if not fired:
        return
    named = ", ".join(record["id"] for record in fired)
    if "write_outside_workdir" in state.get("warnings", {}):
        ctx.log("silent_corruption: not checked (the script wrote outside its working directory)")
        return
    history = state.get("silent", {})
    if not any(rank_history["count"] for rank_history in history.values()):
        ctx.log(f"silent_corruption: {named} acted; nothing to compare (no optimizer step)")
        return
    config = {**world.config, "faults": [dict(record) for record in world.faults], "rank_output": "quiet"}
    reference = reference_run(world, ctx.processes, config, DRY_MARK, "silent")
    if reference["failure"] is not None:
        ctx.log(
            f"silent_corruption: not checked (the run in which {named} wrote nothing failed: {reference['failure']})"
        )
        return
    found = first_difference(history, reference["kept"], state["ranks"])
    if found is None:
        ctx.log(
            f"silent_corruption: {named} acted; the final parameters equal those of the same seed's run "
            "in which it wrote nothing"
        )
        return
    _fail(world, fired, found, ctx)


def first_difference(run: dict[str, Any], reference: dict[str, Any], ranks: int) -> dict[str, Any] | None:
    """None when every rank's final parameters (step count and last digest) equal the reference's;
    else the first kept step whose digests differ (lowest rank first), its first tensor and the ranks
    that differ there (or, past what was kept, the step after the shorter run)."""
    empty = {"count": 0, "last": "", "steps": []}
    sides = [(run.get(str(rank), empty), reference.get(str(rank), empty)) for rank in range(ranks)]
    if all((mine["count"], mine["last"]) == (theirs["count"], theirs["last"]) for mine, theirs in sides):
        return None
    found: dict[str, Any] | None = None
    for rank, (mine, theirs) in enumerate(sides):
        candidate = _rank_difference(mine, theirs)
        if candidate is None:
            continue
        step, tensor = candidate
        if found is None or step < found["step"]:
            found = {"step": step, "tensor": tensor, "ranks": [f"r{rank}"]}
        elif step == found["step"]:
            found["ranks"].append(f"r{rank}")
    return found


def _rank_difference(mine: dict[str, Any], theirs: dict[str, Any]) -> tuple[int, str | None] | None:
    """The first optimizer step (counted from the run's start) at which this rank differs, and its
    first differing tensor when kept; None when the rank's steps are all the same."""
    offset_mine, offset_theirs = mine.get("from", 0), theirs.get("from", 0)
    for position, entry in enumerate(mine["steps"]):
        step = offset_mine + position + 1
        other_position = step - offset_theirs - 1
        if not 0 <= other_position < len(theirs["steps"]):
            continue
        other = theirs["steps"][other_position]
        if entry["digest"] != other["digest"]:
            return step, first_tensor(entry.get("tensors"), other.get("tensors"))
    if (mine["count"], mine["last"]) == (theirs["count"], theirs["last"]):
        return None
    if mine["count"] != theirs["count"]:
        return min(mine["count"], theirs["count"]) + 1, None  # one run took a step the other did not
    return mine["count"], None  # past the kept steps: the last one differs


def _fail(world: World, fired: list[dict[str, Any]], found: dict[str, Any], ctx: Context) -> None:
    config = world.config
    silent = [name for name, setting in DETECTORS if config.get(setting, True)]
    off = [name for name, setting in DETECTORS if not config.get(setting, True)]
    lines = {fault["id"]: fault["line"] for fault in fault_causes.acted(world, {})}
    what = ", ".join(_fault_text(record, lines.get(record["id"])) for record in fired)
    every = len(found["ranks"]) == world.nodes["c10d"]["ranks"]
    where = "every rank" if every else ", ".join(found["ranks"])
    tensor = f"parameter {found['tensor']}" if found["tensor"] else "the parameters"
    told = f"detectors on and silent: {', '.join(silent) or 'none'}"
    if off:
        told += f" (off: {', '.join(off)})"
    message = (
        f"{what} changed the training and no detector noticed: from optimizer step {found['step']} on, "
        f"{tensor} differs on {where} from the same seed's run in which the fault{'s' if len(fired) > 1 else ''} "
        f"fired but wrote nothing; {told}"
    )
    ctx.fail("silent_corruption", message, SITE, node=fired[0]["target"])
    ctx.world.failures[-1].update(
        faults=[record["id"] for record in fired],
        hits=[lines.get(record["id"]) for record in fired],
        step=found["step"],
        tensor=found["tensor"],
        ranks=found["ranks"],
        detectors_silent=silent,
        detectors_off=off,
    )


def _fault_text(record: dict[str, Any], line: str | None) -> str:
    """``fault f1 (corrupt on r1, all_reduce contribution: element 56 bit 12: 0.25 -> 0.2500305)``."""
    head = f"fault {record['id']} ({record['kind']}) on {record['target']}: "
    detail = line[len(head) :] if line and line.startswith(head) else ""
    return f"fault {record['id']} ({record['kind']} on {record['target']}{', ' + detail if detail else ''})"
