"""Where a Session's worlds come from: the one interface between the explore engine and a world.

DESIGN.md's principle is that the world is data wherever it can be: a snapshot restores it, and
the kernel re-executes it from there. Every built-in scenario is like that. A world whose state
lives partly outside the data — ranks that are external processes with their own Python stacks
(``timetravel torchrun``) — cannot be rebuilt from a manifest alone: it needs live checkpoints
beside the snapshot, processes to own and to end. What is not data is owned by this one small
interface, so that :class:`~timetravel.explore.session.Session` stays the one API of every front
end, and every action over a Session (seek, branch, compare, search, minimize, export) reaches a
world only through it:

    ``session.restore_world(manifest, full_check=False)``  a World at a recorded snapshot
    ``session.simulation(world, **options)``               a Simulation that re-executes it
    ``session.source.can_start_at(manifest)``              may a re-execution start there
    ``session.close()``                                    ends what the source owns

A scenario picks its source with ``Scenario.world_source`` (a callable ``(session) ->
WorldSource``); without one, :class:`RecordedWorlds` serves it. Copying the cursor's world
(``session.world_copy()``, a fan-out's snapshot of it) tells the source first (``before_copy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from timetravel.recording.shared_nodes import SharedNodes
from timetravel.sim.kernel import Simulation

if TYPE_CHECKING:
    from timetravel.recording.catalog import ManifestInfo
    from timetravel.recording.reader import RecordingReader
    from timetravel.sim.scenario import Scenario
    from timetravel.sim.world import World


class OpenRecording(Protocol):
    """What a source sees of its Session (the Session itself; named here so that this module
    imports nothing of session.py, which imports it)."""

    reader: RecordingReader
    scenario: Scenario


class WorldSource(Protocol):
    """What a Session needs from the worlds of one kind of scenario (see the module docstring).

    One source serves one Session (an action that opens another branch opens another Session, with
    its own source). ``Session.reload`` replaces the session's reader: read ``session.reader`` when
    it is needed rather than keeping it. The worlds ``simulation`` receives are ones this source
    restored, copies of the cursor's world (``session.world_copy()``: a branch's fork, a fan-out's
    samples) or fresh builds of the scenario (``replay``, ``rerun``, a repro recording): a source
    whose worlds carry external state finds it by the world's position (``events_processed``).
    """

    def restore(self, manifest: ManifestInfo, full_check: bool) -> World:
        """The World recorded at ``manifest`` (``full_check``: also recompute its state hash)."""
        ...

    def simulation(self, world: World, *, recorded: bool = False, **options: Any) -> Simulation:
        """A Simulation over ``world`` with the Simulation's own keyword options (overrides, chain,
        determinism, chain_batch_events, on_chain_batch, choice_log): each caller passes what it
        passed to ``Simulation`` directly, and the source adds what its worlds need. ``recorded``:
        the run re-executes recorded events (a seek, a search), which a source may replay from what
        the recording stores rather than run its worlds' processes (the torch source's journal)."""
        ...

    def can_start_at(self, manifest: ManifestInfo) -> bool:
        """Whether a re-execution may start from this snapshot (a source whose worlds need a
        checkpoint beside the snapshot refuses the snapshots that have none; the Session then
        starts from an earlier one)."""
        ...

    def before_copy(self, world: World) -> None:
        """``world`` (the cursor's) is about to be copied — a branch's fork, a fan-out's samples: a
        source whose worlds carry external state keeps now what a copy will need to run, since the
        original moves on (the torch source forks the live ranks)."""
        ...

    def close(self) -> None:
        """Release what the source owns (processes, checkpoints); the Session calls it on close."""
        ...


class RecordedWorlds:
    """Plain-data worlds: restored from the recording's snapshots, re-executed by the kernel.

    Besides the protocol, it serves the Session's seeks with worlds that share the decoded states
    of the nodes a seek does not run (``restore_shared``, ``private_value``, ``forget_shared``:
    recording/shared_nodes.py). These are optional: a source without them (the torch source)
    gets full restores. ``restore`` itself always decodes every node afresh, for every action that
    runs a world its own way (branches, fan-outs, searches).
    """

    def __init__(self, session: OpenRecording) -> None:
        self.session = session
        self._shared_nodes: SharedNodes | None = None

    def restore(self, manifest: ManifestInfo, full_check: bool = False) -> World:
        return self.session.reader.restore(manifest, full_check=full_check)

    def _shared(self) -> SharedNodes:
        reader = self.session.reader
        if self._shared_nodes is None or self._shared_nodes.reader is not reader:
            self._shared_nodes = SharedNodes(reader)  # Session.reload replaced the reader
        return self._shared_nodes

    def restore_shared(self, manifest: ManifestInfo, private: set[str]) -> tuple[World, dict[str, bytes]]:
        """A world at ``manifest`` whose ``private`` nodes are decoded afresh and whose other nodes
        share decoded states (never to be written; {node: digest} of those is returned too)."""
        return self._shared().restore(manifest, private)

    def private_value(self, digest: bytes) -> Any:
        """A fresh decode of a node state, to replace a shared one before it runs."""
        return self._shared().private_value(digest)

    def forget_shared(self) -> None:
        """Drop every shared decoded state (a re-execution diverged or failed to run)."""
        if self._shared_nodes is not None:
            self._shared_nodes.clear()

    def simulation(self, world: World, *, recorded: bool = False, **options: Any) -> Simulation:
        return Simulation(self.session.scenario, world, **options)

    def can_start_at(self, manifest: ManifestInfo) -> bool:
        return True

    def before_copy(self, world: World) -> None:
        """Nothing to keep: a copy of plain data is complete."""

    def close(self) -> None:
        """Nothing to release: the reader is the Session's."""


def world_source_for(session: OpenRecording) -> WorldSource:
    """The source the session's scenario asks for (``Scenario.world_source``), else RecordedWorlds."""
    factory = getattr(session.scenario, "world_source", None)
    if factory is not None:
        source: WorldSource = factory(session)
        return source
    return RecordedWorlds(session)


__all__ = ["OpenRecording", "RecordedWorlds", "WorldSource", "world_source_for"]
