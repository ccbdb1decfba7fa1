"""The ``resume_mismatch`` detector: a restart that does not resume where the crash interrupted.

A torchelastic restart (``--max-restarts K``) is only correct if the restarted ranks go on exactly as
the job would have without the crash. A resume that forgets the data position (the sampler starts
from batch 0), an RNG, the LR schedule or an optimizer's state still trains — to other weights — and
no other detector sees it: the replicas agree with each other, nothing is NaN, nothing hangs.

**The reference.** The same script, seed and settings with the crash fault records removed (every
other fault kept, under its own id, so its choices are the same) and no restarts: a second, full
run of the script, in its own private working directory (torch/workdir.py), started after the
crashed run's ranks ended (world/reference.py). It costs one more run of the script (without the
restart's repeated steps), paid only by a run that restarted after a crash fault and otherwise passed;
the run's host remembers its last references, so a Session that re-executes the run to its end pays
it once. Both runs are pure functions of their inputs, so the comparison is deterministic.

**What is compared.** Per rank, the parameter digests each optimizer step reports (the same digests
the divergence detector uses) and the first one-element all_reduce before that step (the loss most
scripts average for logging), kept in the ``c10d`` node as ``resume/<rank>`` from the last restart
on (and, in the reference, from the start). Steps are aligned from the end: a correct resume ends at
the step the reference ends at, so the restarted run's step ``j`` (of ``m``) is the reference's step
``N - m + j``. The first step, in that order and then by rank, whose digests differ is the failure,
with the first differing tensor by name.

Not compared (said in the log): a restart the script caused itself (an ``os._exit`` or an exception
on the first attempt — the reference would fail the same way), ``reduce_order=arrival`` (after a
restart the arrival order may differ legitimately), a script that wrote outside its working directory
(the reference would read the crashed run's checkpoint files), and a reference that failed.
"""

from __future__ import annotations

import copy
from typing import Any

import xxhash

from timetravel.sim.context import Context
from timetravel.sim.world import World
from timetravel.torch.world.reference import is_reference, reference_run

RESUME_STEPS_MAX = 65_536
"""Optimizer steps kept per rank (after the last restart; in the reference, from the start). Each is a
digest and a float; later steps are counted only, so alignment from the end still holds."""

RESUME_TENSOR_STEPS_MAX = 64
"""Steps after the restart whose digests are kept per tensor (to name the first differing tensor):
a resume bug shows at the first step after the resume, so a few are enough; later steps keep one
digest over all tensors, which still finds the step."""

MARK = "resume_reference"
"""The ``c10d`` node of a reference run (the run without the crash) is marked so."""


def recording(state: dict[str, Any], ctx: Context) -> bool:
    """Whether the ``c10d`` node keeps step digests: after a restart, or in a reference run."""
    if not ctx.world.config.get("detect_resume_mismatch", True) and not state.get(MARK):
        return False
    return bool(state["incarnation"] > 0 or state.get(MARK))


def note_loss(state: dict[str, Any], rank: str, index: int, value: float, ctx: Context) -> None:
    """A one-element all_reduce's result: the first since the rank's last step is that step's loss."""
    if index == 0 and recording(state, ctx):
        state.setdefault("resume_loss", {})[rank] = value


def note_step(state: dict[str, Any], rank: str, params: list[Any], ctx: Context) -> None:
    """A rank's optimizer step: keep its digests (and its loss) for the comparison at the end."""
    if not recording(state, ctx):
        return
    history = state.setdefault("resume", {}).setdefault(rank, {"count": 0, "steps": []})
    history["count"] += 1
    loss = state.get("resume_loss", {}).pop(rank, None)
    if len(history["steps"]) >= RESUME_STEPS_MAX:
        return
    entry = step_entry(params, with_tensors=len(history["steps"]) < RESUME_TENSOR_STEPS_MAX)
    entry["loss"] = loss
    history["steps"].append(entry)


def step_entry(params: list[Any], *, with_tensors: bool) -> dict[str, Any]:
    """One optimizer step of a rank, from its step report's ``(name, shape, dtype, digest)`` rows: a
    ``digest`` over every tensor and, ``with_tensors``, the ``tensors`` (name, digest) themselves."""
    named = [[str(name), str(digest)] for name, _shape, _dtype, digest in params]
    entry: dict[str, Any] = {
        "digest": xxhash.xxh3_64_hexdigest("|".join(f"{n}:{d}" for n, d in named).encode())
    }
    if with_tensors:
        entry["tensors"] = named
    return entry


def forget(state: dict[str, Any]) -> None:
    """A restart: only the last incarnation's steps are compared."""
    state.pop("resume", None)
    state.pop("resume_loss", None)


def check(world: World, ctx: Context) -> None:
    """At the end of a passing run that restarted after a crash fault: compare with the reference."""
    state = world.nodes["c10d"]
    config = world.config
    if world.failures or not config.get("detect_resume_mismatch", True) or not state["restarts"]:
        return
    if is_reference(state):
        return
    crashes = [
        record
        for record in world.faults
        if record["kind"] == "crash" and world.fabric.get("fault_hits", {}).get(record["id"])
    ]
    if not crashes:
        ctx.log("resume_mismatch: not checked (the restart was not caused by a crash fault)")
        return
    if config["reduce_order"] != "canonical":
        ctx.log("resume_mismatch: not checked (reduce_order=arrival may differ after a restart)")
        return
    if "write_outside_workdir" in state.get("warnings", {}):
        ctx.log("resume_mismatch: not checked (the script wrote outside its working directory)")
        return
    if not any(history["count"] for history in state.get("resume", {}).values()):
        ctx.log("resume_mismatch: nothing to compare (no optimizer step after the restart)")
        return
    reference = reference_run(world, ctx.processes, reference_config(world), MARK, "resume")
    if reference["failure"] is not None:
        ctx.log(f"resume_mismatch: not checked (the run without the crash failed: {reference['failure']})")
        return
    found = first_mismatch(state.get("resume", {}), reference["kept"], state["ranks"])
    if found is None:
        ctx.log(
            f"resume_mismatch: every step after restart {state['restarts']} matches the run without the crash"
        )
        return
    _fail(found, state["restarts"], ctx)


def reference_config(world: World) -> dict[str, Any]:
    """The crashed run's config without its crash faults and restarts (other faults keep their ids)."""
    config = dict(world.config)
    config["faults"] = [copy.deepcopy(record) for record in world.faults if record["kind"] != "crash"]
    # detect_resume_mismatch stays as it is: the reference's ranks must report the same digests (FSDP2
    # shards included); without restarts, its own check never runs
    config.update(max_restarts=0, rank_output="quiet")
    return config


def first_mismatch(restarted: dict[str, Any], reference: dict[str, Any], ranks: int) -> dict[str, Any] | None:
    """The earliest step (then the lowest rank) at which the restarted run differs from the reference."""
    found: dict[str, Any] | None = None
    for rank in range(ranks):
        mine = restarted.get(str(rank), {"count": 0, "steps": []})
        theirs = reference.get(str(rank), {"count": 0, "steps": []})
        candidate = _rank_mismatch(rank, mine, theirs)
        if candidate is not None and (found is None or candidate["after_restart"] < found["after_restart"]):
            found = candidate
    return found


def _rank_mismatch(rank: int, mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any] | None:
    offset = theirs["count"] - mine["count"]
    if offset < 0:
        return {
            "rank": rank,
            "after_restart": theirs["count"] + 1,
            "step": theirs["count"] + 1,
            "tensor": None,
            "extra_steps": mine["count"] - theirs["count"],
            "loss": None,
        }
    for position, entry in enumerate(mine["steps"]):
        if offset + position >= len(theirs["steps"]):
            return None
        other = theirs["steps"][offset + position]
        if entry["digest"] == other["digest"]:
            continue
        return {
            "rank": rank,
            "after_restart": position + 1,
            "step": offset + position + 1,
            "tensor": first_tensor(entry.get("tensors"), other.get("tensors")),
            "loss": {"run": entry["loss"], "reference": other["loss"]},
        }
    return None


def first_tensor(mine: list[list[str]] | None, theirs: list[list[str]] | None) -> str | None:
    """The first tensor by name whose digest differs between two steps' ``tensors`` (None: not kept)."""
    if mine is None or theirs is None:
        return None
    for (name, digest), (other_name, other_digest) in zip(mine, theirs, strict=False):
        if name != other_name or digest != other_digest:
            return name
    if len(mine) != len(theirs):
        return (mine if len(mine) > len(theirs) else theirs)[min(len(mine), len(theirs))][0]
    return None


def _fail(found: dict[str, Any], restarts: int, ctx: Context) -> None:
    node = f"r{found['rank']}"
    if "extra_steps" in found:
        message = (
            f"after restart {restarts}, {node} took {found['extra_steps']} optimizer step(s) more than the "
            "same seed's run without the crash: the resume repeated steps"
        )
    else:
        tensor = f"parameter {found['tensor']}" if found["tensor"] else "its parameters (tensor not kept)"
        loss = found["loss"]
        told = ""
        if loss["run"] is not None and loss["reference"] is not None:
            told = f"; loss {loss['run']:.6g}, without the crash {loss['reference']:.6g}"
        message = (
            f"after restart {restarts}, optimizer step {found['step']} (step {found['after_restart']} after "
            f"the resume) differs on {node} from the same seed's run without the crash: {tensor}{told}"
        )
    ctx.fail("resume_mismatch", message, "torch.resume.mismatch", node=node)
    ctx.world.failures[-1].update(
        step=found["step"],
        step_after_restart=found["after_restart"],
        tensor=found["tensor"],
        loss=found["loss"],
        restarts=restarts,
    )
