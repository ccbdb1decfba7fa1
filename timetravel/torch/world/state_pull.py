"""Pulling training state's bytes from the ranks (coordinator side): what a recording keeps, what a
command rebuilds.

A rank describes its state at every state step (dtype, shape and page digests: rank/state.py) and
keeps the tensors of its latest one; the World holds them as elided arrays (world/state.py). Their
bytes cross only when something asks, here: a :class:`StatePulls` set on the run's host
(``RankHost.state_pulls``) says which steps it wants and takes what the ranks send, checked page by
page against the digests the World holds. A pull never changes the World — its hash reads the
digests, which are the same — so a recorded run and an unrecorded one are the same run.

* **When**: at the poll that read a rank's step message (ranks.py): the rank then waits on its next
  collective, and the tensors of its latest step are the step's (its next optimizer step needs that
  collective's result). And at the end (:meth:`StatePulls.final`): every rank still there (waiting,
  or lingering after its exit) is asked for its latest step, once.
* **Which** (a recording, :meth:`StatePulls.for_recording`): the parameters and optimizer state of the
  steps on a geometric grid — the 32nd, 64th, 128th … state step since the recording started (a
  branch counts from its fork) — and at the end the last state of every rank, its local gradients
  too when the run failed: dense where failures are. Pages already pulled are not asked for again
  (DDP replicas hold the same parameters and moments: one rank's are pulled). A recording stays
  logarithmic in the run's steps; ``--max-record-bytes`` thins what it kept (recording/budget.py).
* **For a command** (:meth:`StatePulls.into_every_step`): a torch Session's re-executions pull every
  tensor of every state step into the World in place of the elided arrays, so the worlds a command
  reads hold the values (world_source.py: a snapshot world that holds only digests is rebuilt so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from timetravel.sim.elided import ElidedArray
from timetravel.sim.encoding import page_digests
from timetravel.sim.world import World
from timetravel.torch.protocol import arrays
from timetravel.torch.protocol.limits import STATE_PULL_BYTES_MAX
from timetravel.torch.protocol.wire import ChannelClosed, ProtocolError

STATE_STEP_GRID_BASE = 2
STATE_STEP_GRID_FIRST = 32
"""A recording keeps the state of the 32nd, 64th, 128th … state step (and the last): at most one
state per 32 steps, and log2(steps) - 4 of them, so a recording grows less than linearly with the
steps and, from 200 steps on, stays under a tenth of (parameters x 4 bytes x steps) for AdamW (three
tensors a parameter kept: docs/performance.md has the formula)."""
REBUILD_STEP_BYTES_MAX = 64 << 20
"""A command's rebuild (values pulled into the World: ``for_steps``, ``into_every_step``) takes a
rank's state step only up to this many bytes. Every world its re-execution keeps (checkpoints on the
way, parked worlds) holds what was pulled into it, for every rank: on bench torch's 10M-parameter
AdamW model (160 MB a rank and step, 8 ranks) five rebuilds grew the process past 10 GB and the
kernel killed it. Above it the step's values stay digests and the command says why (``notes``).
A recording's kept states and a run's last state are not bound by it (``state_bytes_max``)."""
PULLED_ARRAYS_MAX = 100_000
"""Arrays pulled and not yet handed to the recorder (it takes them at its next snapshot)."""


def on_grid(ordinal: int, base: int = STATE_STEP_GRID_BASE, first: int = STATE_STEP_GRID_FIRST) -> bool:
    """Whether the ``ordinal``-th state step (1-based) is one a recording keeps: first, first x base,
    first x base², …"""
    if ordinal < first or ordinal % first:
        return False
    ordinal //= first
    while ordinal > 1 and ordinal % base == 0:
        ordinal //= base
    return ordinal == 1


def described_paths(described: dict[str, Any], *, grads: bool) -> dict[str, ElidedArray]:
    """The elided tensors of a step (what world/state.py holds) by the path a pull names them with."""
    found: dict[str, ElidedArray] = {}
    for name, value in described.get("params", {}).items():
        found[f"params/{name}"] = value
    for name, entries in described.get("optimizer", {}).items():
        for key, value in entries.items():
            found[f"optimizer/{name}/{key}"] = value
    if grads:
        for name, value in described.get("grads", {}).items():
            found[f"grads/{name}"] = value
    return {path: value for path, value in found.items() if isinstance(value, ElidedArray)}


@dataclass
class StatePulls:
    """What a run's host pulls, and what it pulled; see the module docstring."""

    grid_base: int | None = STATE_STEP_GRID_BASE
    """Recording: pull state steps on this grid (None: only ``wanted``)."""
    wanted: dict[int, int] = field(default_factory=dict)
    """For a command: rank -> the state step whose every tensor to pull."""
    into_world: bool = False
    """Put what was pulled into the World (a command's rebuild) rather than hand it to a recorder."""
    arrays: list[np.ndarray] = field(default_factory=list, repr=False)
    """Pulled and checked, not yet taken by the recorder (``take_arrays``)."""
    pages_known: set[bytes] = field(default_factory=set, repr=False)
    notes: list[str] = field(default_factory=list)
    """What could not be pulled, said once each (the recorder writes them as NOTE frames)."""
    pending: dict[int, set[int]] = field(default_factory=dict)
    """Step -> the ranks pulled at it whose World has not stored that step yet (``due``)."""
    first_step: dict[int, int] = field(default_factory=dict)
    """Rank -> the first state step this recording saw (the grid counts from it)."""
    ordinals: dict[int, int] = field(default_factory=dict)
    finished: bool = False

    @classmethod
    def for_recording(cls) -> StatePulls:
        return cls()

    every_step: bool = False
    """Pull every state step's tensors, gradients too, into the World (a Session's re-executions:
    the worlds its commands read hold the values, as they did when every step sent its state)."""

    @classmethod
    def for_steps(cls, wanted: dict[int, int]) -> StatePulls:
        return cls(grid_base=None, wanted=dict(wanted), into_world=True)

    @classmethod
    def into_every_step(cls) -> StatePulls:
        return cls(grid_base=None, into_world=True, every_step=True)

    # -- at a poll ----------------------------------------------------------------------------------

    def at_step(self, live: Any, rank: int, step: int, described: dict[str, Any]) -> None:
        """The poll of ``rank`` read its state step ``step`` (``described``: world/state.py's
        ``state_incoming`` entry) and the rank now waits: pull what is wanted of it."""
        self.ordinals[rank] = self.ordinals.get(rank, 0) + 1
        wanted_here = self.every_step or self.wanted.get(rank) == step
        if not wanted_here and (self.grid_base is None or not on_grid(self.ordinals[rank], self.grid_base)):
            return
        if self.pull(live, rank, step, described, grads=wanted_here):
            self.pending.setdefault(step, set()).add(rank)

    def pull(
        self,
        live: Any,
        rank: int,
        step: int,
        described: dict[str, Any],
        *,
        grads: bool,
        into_world: bool = False,
    ) -> bool:
        """Pull ``rank``'s tensors of ``step`` that are not known yet (``into_world``: all of them, put
        in the World in place of the elided arrays); True when something came."""
        into_world = into_world or self.into_world
        elided = described_paths(described, grads=grads)
        if not into_world:
            elided = {p: v for p, v in elided.items() if not set(v.page_digests) <= self.pages_known}
        if not elided:
            return False
        size = sum(value.nbytes for value in elided.values())
        if self.into_world and size > REBUILD_STEP_BYTES_MAX:
            self._note(
                f"the values of step {step} of r{rank} are not rebuilt: {size} bytes of state is above the "
                f"{REBUILD_STEP_BYTES_MAX} bytes a command's re-execution holds a rank and step"
            )
            return False
        pulled: dict[str, np.ndarray] = {}
        for paths in _batches(elided):
            try:
                reply = live.pull(rank, {"kind": "state_pull", "step": step, "paths": paths})
            except (ChannelClosed, ProtocolError, TimeoutError) as error:
                self._note(f"the state of step {step} of r{rank} could not be pulled: {error}")
                return False
            if reply.get("refused") or reply.get("stale"):
                why = reply.get("refused") or "the rank had moved on"
                self._note(f"the state of step {step} of r{rank} was not stored: {why}")
                return False
            pulled.update(self._checked(rank, step, {p: elided[p] for p in paths}, reply.get("tensors", {})))
        for path in pulled:  # known once the whole step came: a step cut short keeps none of it
            self.pages_known.update(elided[path].page_digests)
        if into_world:
            _replace(described, pulled)
        if not self.into_world and len(self.arrays) < PULLED_ARRAYS_MAX:  # a recording's: it writes them
            self.arrays.extend(pulled.values())
        return bool(pulled)

    def _checked(
        self, rank: int, step: int, elided: dict[str, ElidedArray], tensors: dict[str, Any]
    ) -> dict[str, np.ndarray]:
        """The pulled tensors whose bytes have the page digests the World holds (others are said)."""
        checked: dict[str, np.ndarray] = {}
        for path, stand_in in elided.items():
            wire = tensors.get(path)
            try:
                decoded = None if wire is None else arrays.decode(wire)
            except arrays.TensorFormatError:
                decoded = None
            array = decoded if isinstance(decoded, np.ndarray) else None
            if (
                array is None
                or arrays.dtype_name(array) != stand_in.dtype_name
                or tuple(array.shape) != stand_in.shape
                or tuple(page_digests(array)) != stand_in.page_digests
            ):
                self._note(f"r{rank} sent {path} of step {step} with other bytes than it described")
                continue
            checked[path] = array
        return checked

    def _note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < 100:
            self.notes.append(text)

    # -- the recorder's side ----------------------------------------------------------------------------

    def due(self, world: World) -> bool:
        """A pulled step is now stored on every rank (or passed): a snapshot taken now holds it (the
        recorder takes one). Every rank: DDP replicas share the pulled pages of one of them."""
        if not self.pending:
            return False
        reached = min((_state_step(world, node) for node in _ranks_running(world)), default=None)
        done = [step for step in self.pending if reached is None or reached >= step]
        for step in done:
            del self.pending[step]
        return bool(done)

    def take_arrays(self) -> list[np.ndarray]:
        taken, self.arrays = self.arrays, []
        return taken

    def final(self, live: Any, world: World) -> None:
        """At the end: each rank's latest state step into the World (once), its local gradients too
        when the run failed (dense where failures are): a run's last world holds its ranks' last
        state, and a recording's final snapshot stores it."""
        if self.finished or live is None:
            return
        self.finished = True
        for rank in sorted(live.sockets):
            node = world.nodes.get(f"r{rank}")
            if node is None:
                continue
            latest = latest_described(node)
            if latest is None:
                continue
            step, described = latest
            try:
                if live.ahead(rank, node["delivered"]):
                    live.quiesce(rank)
            except (ChannelClosed, ProtocolError, TimeoutError):
                continue
            self.pull(live, rank, step, described, grads=bool(world.failures), into_world=True)


def latest_described(node: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """A rank node's latest state step and its tensors (the one on its way in, else the stored one)."""
    incoming = node.get("state_incoming") or {}
    if incoming:
        step = max(incoming, key=int)
        return int(step), incoming[step]
    if "state_step" not in node:
        return None
    optimizer = {k: v for k, v in node.get("optimizer", {}).items() if k != "param_groups"}
    described = {"params": node.get("params", {}), "grads": node.get("grads", {}), "optimizer": optimizer}
    return int(node["state_step"]), described


def _batches(elided: dict[str, ElidedArray]) -> list[list[str]]:
    """The paths of ``elided`` in name order, cut into pulls of at most ``STATE_PULL_BYTES_MAX``
    bytes each (a larger tensor alone in its own)."""
    batches: list[list[str]] = [[]]
    size = 0
    for path in sorted(elided):
        nbytes = elided[path].nbytes
        if batches[-1] and size + nbytes > STATE_PULL_BYTES_MAX:
            batches.append([])
            size = 0
        batches[-1].append(path)
        size += nbytes
    return batches


def _state_step(world: World, node: dict[str, Any]) -> int:
    return int(node.get("state_step", 0))


def _ranks_running(world: World) -> list[dict[str, Any]]:
    """The rank nodes whose process may still store a state step (not ended)."""
    return [
        node
        for name, node in world.nodes.items()
        if name.startswith("r")
        and name[1:].isdigit()
        and node
        and node.get("status") not in ("exited", "crashed")
    ]


def _replace(described: dict[str, Any], pulled: dict[str, np.ndarray]) -> None:
    """Put pulled arrays in place of the elided ones they stand for (the same digests)."""
    for path, array in pulled.items():
        part, _, rest = path.partition("/")
        if part == "optimizer":
            name, _, key = rest.rpartition("/")
            described["optimizer"][name][key] = array
        else:
            described[part][rest] = array
