"""Where a torch run's failure stands in the user's terms (coordinator side; no torch here).

``explain`` on a torch recording ends at four things the World's data alone cannot say in one
place: the **rank**, the optimizer **step** it was in, the **sampler indices** of that step's
batches and the first **module** whose output or gradient went non-finite.

* :func:`failure_site` reads the first three from the stored recording (no execution): the rank is
  the failure's node; the step is the one in progress on that rank (the steps it completed, from
  ``nodes/c10d/steps_checked`` and the step reports ``c10d`` still holds, + 1; a divergence names
  its own step); the indices are ``nodes/rN/batch`` (torch/rank_batches.py) when that rank's
  DataLoader recorded them for that step.
* :func:`probing` is the side channel of the fourth: while it is active, the rank it names gets
  the read-only hooks of torch/rank_probe.py for step S and posts one ``probe`` message;
  ``scenario.on_poll`` hands it to :func:`note` and never to the World (no event, no state: the
  re-executed events match the recorded hash chain). The caller (explore/explain_torch.py) runs
  the re-execution itself, from one of two starts:

  - **a snapshot before the step** (``probing(..., world=W)``): W is the re-executed world; when
    the torch world source resumes W's ranks from a checkpoint (or rebuilds them, as a seek does)
    it calls :func:`on_resume` before handing them anything, which asks the waiting rank to install
    the hooks (``{"kind": "probe"}``, torch/channel.py). A process that may be inside step S
    already refuses, and says so in its ``probe`` message. W's ranks are never kept as checkpoints
    (:func:`is_probed`), so no later seek resumes a probed process;
  - **#0**: the rank starts with ``settings["probe"] = {"step": S}`` (:func:`settings_for`, read
    by ``scenario.rank_specs``), a fresh process that read its settings.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from timetravel.sim.scenario import ConfigError
from timetravel.sim.world import World

PROBE_SETTING = "probe"
_requested: dict[int, int] = {}
"""Rank -> the optimizer step its probe watches (empty outside :func:`probing`)."""
_findings: dict[int, dict[str, Any]] = {}
"""Rank -> its ``probe`` message's finding, while probing (the first message per rank only)."""
_target: list[World] = []
"""The world whose resumed ranks get the probe (empty: the probe starts at #0, by settings)."""
_asked: set[int] = set()
"""Ranks of the target world asked to install the probe (once: a second resume is not probed)."""


@contextlib.contextmanager
def probing(rank: int, step: int, world: World | None = None) -> Iterator[dict[int, dict[str, Any]]]:
    """While active, rank ``rank`` gets a probe of step ``step`` — when ``world``'s ranks are
    resumed (:func:`on_resume`), or, without ``world``, when it starts; yields the findings by rank."""
    _requested.clear()
    _findings.clear()
    _target.clear()
    _asked.clear()
    _requested[rank] = step
    if world is not None:
        _target.append(world)
    try:
        yield _findings
    finally:
        _requested.clear()
        _target.clear()
        _asked.clear()


def settings_for(rank: int) -> dict[str, Any]:
    """The extra rank settings a rank starts with (a probe from #0, while :func:`probing` names it;
    never while a probe starts from a snapshot, whose rebuilds start ranks that are kept)."""
    step = _requested.get(rank)
    return {PROBE_SETTING: {"step": step}} if step is not None and not _target else {}


def is_probed(world: World) -> bool:
    """Whether ``world`` is the one a probe re-executes (its ranks must not become checkpoints)."""
    return any(target is world for target in _target)


def on_resume(world: World, live: Any) -> None:
    """The torch world source resumed ``world``'s ranks into ``live`` and has handed them nothing
    yet: if it is the probed world, ask the probed rank, blocked in its wait, to install the hooks."""
    if not is_probed(world):
        return
    for rank, step in _requested.items():
        if rank in _asked:
            continue
        _asked.add(rank)
        if rank in live.sockets:
            live.send(rank, {"kind": "probe", "step": step})
        else:
            _findings[rank] = {"step": step, "finding": None, "calls": 0, "refused": "its process had ended"}


def end_probe(world: World) -> None:
    """Stop the probed world's ranks and remove their working directory unless checkpoints share it:
    no checkpoint holds the probed processes, so nothing else will resume them or read it."""
    from timetravel.torch.world import driver, world_source

    live = driver.driver_for(world)
    driver.stop_world(world)
    shared = world_source._SHARED.directories
    if live is not None and live.workdir is not None and all(d is not live.workdir for d in shared):
        live.workdir.close()


def note(rank: int, message: dict[str, Any]) -> None:
    """A rank's ``probe`` message (from ``scenario.on_poll``): kept only when it answers the probe
    asked (a checkpoint of a probed rank resumed later, outside :func:`probing`, is ignored)."""
    if _requested.get(rank) != message.get("step") or rank in _findings:
        return
    finding = message.get("finding")
    _findings[rank] = {
        "step": int(message["step"]),
        "finding": dict(finding) if isinstance(finding, dict) else None,
        "calls": int(message.get("calls", 0)),
        "refused": str(message["refused"]) if message.get("refused") else None,
    }


def execution_refusal(config: dict[str, Any]) -> str | None:
    """Why this recording's ranks may not start here (no ``--script``, a function target, no
    torch), in one line; None when they may."""
    from timetravel.torch.world import scenario
    from timetravel.torch.world.recorded_script import torch_missing_message

    try:
        scenario._check_script(config)
    except ConfigError as error:  # NotAuthorizedError is one
        return str(error)
    return torch_missing_message()


def rank_number(node: Any) -> int | None:
    text = str(node or "")
    return int(text[1:]) if text.startswith("r") and text[1:].isdigit() else None


def steps_completed(world: World, rank: int) -> int:
    """Optimizer steps ``rank`` completed: every rank's (``steps_checked``) or a later one it
    reported while a peer had not yet (``c10d``'s pending step reports)."""
    c10d_state = world.nodes["c10d"]
    reported = [int(step) for step, reports in c10d_state.get("steps", {}).items() if str(rank) in reports]
    return max([int(c10d_state.get("steps_checked", 0)), *reported])


def failure_site(world: World, failure: dict[str, Any]) -> dict[str, Any] | None:
    """Rank, step and sampler indices of ``failure`` from the world it ended in (plain data);
    None when the failure names no rank."""
    rank = rank_number(failure.get("node"))
    if rank is None or f"r{rank}" not in world.nodes:
        return None
    if failure.get("kind") == "divergence" and isinstance(failure.get("step"), int):
        step = int(failure["step"])  # the parameters differ after this step: it went wrong in it
    else:
        step = steps_completed(world, rank) + 1
    site: dict[str, Any] = {"rank": f"r{rank}", "step": step, "steps_completed": step - 1}
    batch = world.nodes[f"r{rank}"].get("batch")
    if not isinstance(batch, dict):
        site.update(indices=None, indices_note="no DataLoader: the script draws its batches itself")
    elif batch.get("step") != step:
        site.update(
            indices=None,
            indices_note=f"the DataLoader loaded no batch in step {step} (its last: step {batch.get('step')})",
        )
    else:
        dropped = int(batch.get("indices_dropped", 0))
        site.update(
            indices=list(batch["indices"]),
            batches=int(batch.get("batches", 1)),
            indices_note=f"{dropped} more not kept" if dropped else "",
        )
    return site


__all__ = [
    "PROBE_SETTING",
    "end_probe",
    "execution_refusal",
    "failure_site",
    "is_probed",
    "note",
    "on_resume",
    "probing",
    "rank_number",
    "settings_for",
    "steps_completed",
]
