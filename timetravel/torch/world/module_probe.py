"""Where a torch run's failure stands in the user's terms (coordinator side; no torch here).

``explain`` on a torch recording ends at four things the World's data alone cannot say in one
place: the **rank**, the optimizer **step** it was in, the **sampler indices** of that step's
batches and the first **module** whose output or gradient went non-finite.

* :func:`failure_site` reads the first three from the stored recording (no execution): the rank is
  the failure's node; the step is the one in progress on that rank (the steps it completed, from
  ``nodes/c10d/steps_checked`` and the step reports ``c10d`` still holds, + 1; a divergence names
  its own step); the indices are ``nodes/rN/batch`` (torch/rank/batches.py) when that rank's
  DataLoader recorded them for that step.
* :class:`Probe` is the side channel of the fourth: while :func:`probing` puts one on the host that
  runs a re-execution, the rank it names gets the read-only hooks of torch/rank/probe.py for step S
  and posts one ``probe`` message; the rank node's poll (ranks.py) hands it to :meth:`Probe.note`
  and never to the World (no event, no state: the re-executed events match the recorded hash
  chain). The caller (explore/explain_torch.py) runs the re-execution itself, from one of two starts:

  - **a snapshot before the step** (``probing(..., world=W)``): W is the re-executed world; when
    the torch world source resumes W's ranks from a checkpoint (or rebuilds them, as a seek does)
    it calls :meth:`Probe.on_resume` before handing them anything, which asks the waiting rank to
    install the hooks (``{"kind": "probe"}``, torch/rank/channel.py). A process that may be inside
    step S already refuses, and says so in its ``probe`` message. W's ranks are never kept as
    checkpoints (:meth:`Probe.is_probed`), so no later seek resumes a probed process;
  - **#0**: the rank starts with ``settings["probe"] = {"step": S}`` (:meth:`Probe.start_settings`,
    read by the host when it makes the rank specs), a fresh process that read its settings.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from timetravel.sim.launch import Launch
from timetravel.sim.scenario import ConfigError
from timetravel.sim.world import World
from timetravel.torch.world import replicas
from timetravel.torch.world.recorded_script import torch_missing_message
from timetravel.torch.world.specs import script_to_run

PROBE_SETTING = "probe"


class Probe:
    """One probe request while it runs: rank ``rank`` gets the hooks for optimizer step ``step`` —
    when ``world``'s ranks are resumed (:meth:`on_resume`), or, without ``world``, when it starts
    (:meth:`start_settings`). Held by the host that runs the re-execution (``RankHost.probe``)."""

    def __init__(self, rank: int, step: int, world: World | None = None, *, init: bool = False) -> None:
        self.rank = rank
        self.step = step
        self.world = world
        self.init = init and world is None
        """Also watch, from the start, which parameters were never written (torch/rank/init_watch.py)."""
        self.findings: dict[int, dict[str, Any]] = {}
        """Rank -> its ``probe`` message's finding (the first message per rank only)."""
        self.init_reports: dict[int, dict[str, Any]] = {}
        """Rank -> the init watch's report at its first forward (uninitialised parameters)."""
        self.collectives: dict[int, dict[str, Any]] = {}
        """Rank -> its first non-finite collective input, mapped back to parameters."""
        self.asked = False
        """Whether the probed rank of ``world`` was asked to install the hooks (once: a second
        resume is not probed)."""

    def start_settings(self) -> dict[int, dict[str, Any]]:
        """The extra settings ranks start with (a probe from #0; never while a probe starts from a
        snapshot, whose rebuilds start ranks that are kept)."""
        if self.world is not None:
            return {}
        return {self.rank: {PROBE_SETTING: {"step": self.step, "init": self.init}}}

    def is_probed(self, world: World) -> bool:
        """Whether ``world``'s ranks must not become checkpoints: it is the world this probe
        re-executes, or any while ranks start probed (from #0)."""
        return self.world is None or self.world is world

    def on_resume(self, world: World, live: Any) -> None:
        """``world``'s ranks were resumed into ``live`` and handed nothing yet: if it is the probed
        world, ask the probed rank, blocked in its wait, to install the hooks."""
        if not self.is_probed(world) or self.asked:
            return
        self.asked = True
        if self.rank in live.sockets:
            live.send(self.rank, {"kind": "probe", "step": self.step})
        else:
            self.findings[self.rank] = {
                "step": self.step,
                "finding": None,
                "calls": 0,
                "refused": "its process had ended",
            }

    def note(self, rank: int, message: dict[str, Any]) -> None:
        """A rank's ``probe`` message (from the rank node's poll): kept only when it answers this
        probe (a checkpoint of a probed rank resumed later, outside the probe, is ignored)."""
        if rank != self.rank or message.get("step") != self.step:
            return
        if isinstance(message.get("init"), dict):
            self.init_reports.setdefault(rank, dict(message["init"]))
            return
        if isinstance(message.get("collective"), dict):
            self.collectives.setdefault(rank, dict(message["collective"]))
            return
        if rank in self.findings:
            return
        finding = message.get("finding")
        self.findings[rank] = {
            "step": int(message["step"]),
            "finding": dict(finding) if isinstance(finding, dict) else None,
            "calls": int(message.get("calls", 0)),
            "refused": str(message["refused"]) if message.get("refused") else None,
        }


@contextlib.contextmanager
def probing(
    host: Any, rank: int, step: int, world: World | None = None, *, init: bool = False
) -> Iterator[Probe]:
    """While active, ``host``'s re-execution probes ``rank`` in ``step``; yields the :class:`Probe`
    (its findings by rank). ``init``: from the start, also watch which parameters were never written."""
    assert host.probe is None, "one probe at a time per host"
    probe = Probe(rank, step, world, init=init)
    host.probe = probe
    try:
        yield probe
    finally:
        host.probe = None


def execution_refusal(config: dict[str, Any], launch: Launch) -> str | None:
    """Why this recording's ranks may not start here (no ``--script``, a function target, no
    torch), in one line; None when they may."""
    try:
        script_to_run(config, launch)
    except ConfigError as error:  # NotAuthorizedError is one
        return str(error)
    return torch_missing_message()


def rank_number(node: Any) -> int | None:
    text = str(node or "")
    return int(text[1:]) if text.startswith("r") and text[1:].isdigit() else None


def steps_completed(world: World, rank: int) -> int:
    """Optimizer steps ``rank`` completed (:func:`replicas.steps_completed` over the ``c10d`` node)."""
    return replicas.steps_completed(world.nodes["c10d"], rank)


def failure_site(world: World, failure: dict[str, Any]) -> dict[str, Any] | None:
    """Rank, step and sampler indices of ``failure`` from the world it ended in (plain data);
    None when the failure names no rank."""
    rank = rank_number(failure.get("node"))
    if rank is None or f"r{rank}" not in world.nodes:
        return None
    if failure.get("kind") in ("divergence", "silent_corruption") and isinstance(failure.get("step"), int):
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
    "Probe",
    "execution_refusal",
    "failure_site",
    "probing",
    "rank_number",
    "steps_completed",
]
