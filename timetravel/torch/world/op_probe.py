"""``diff --ops``'s side channel (coordinator side; no torch here): every rank hashes the ops of one step.

While :func:`tracing_ops` puts an :class:`OpsProbe` on the host that runs a re-execution, every rank
gets the op trace of torch/rank/op_trace.py for optimizer step S — when the re-executed world's
ranks are resumed from a checkpoint (:meth:`OpsProbe.on_resume`: each waiting rank is asked, before
it is handed anything; a process that may be inside step S already refuses), or, re-executing from
#0, in every rank's start settings. Their ``probe`` messages (``ops`` records, captured ``values``,
``done``) reach :meth:`OpsProbe.note` through the rank nodes' poll (ranks.py) and never the World: no
event, no state, so the re-executed events match the recorded hash chain. No checkpoint of a traced
process is ever kept (:meth:`OpsProbe.is_probed`), so no later seek resumes one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from timetravel.sim.world import World
from timetravel.torch.protocol import arrays
from timetravel.torch.world.module_probe import PROBE_SETTING

OPS_PER_RANK_MAX = 200_000
"""Op records kept per rank (the rank stops at the same bound)."""
VALUES_PER_RANK_MAX = 64


class OpsProbe:
    """One op trace while it runs: every rank's ops of optimizer step ``step``; ``capture`` lists, per
    rank, the (module, op, occurrence) keys whose output values it sends too."""

    def __init__(
        self,
        step: int,
        ranks: int,
        world: World | None = None,
        capture: dict[int, list[list[Any]]] | None = None,
        *,
        whole_step: bool = True,
    ) -> None:
        self.step = step
        self.ranks = ranks
        self.whole_step = whole_step
        """False: the ranks start hashing where they stand (mid-step), both branches at one event."""
        self.world = world
        self.capture = capture or {}
        self.ops: dict[int, list[list[Any]]] = {}
        """Rank -> its op records ``[index, t_ns, module, op, occurrence, shapes, dtypes, digest]``."""
        self.values: dict[int, dict[tuple[str, str, int], list[Any]]] = {}
        """Rank -> (module, op, occurrence) -> the captured output arrays."""
        self.done: set[int] = set()
        self.refused: dict[int, str] = {}
        self.asked = False

    def request(self, rank: int) -> dict[str, Any]:
        capture = list(self.capture.get(rank, []))
        return {"step": self.step, "ops": {"capture": capture, "whole_step": self.whole_step}}

    def start_settings(self) -> dict[int, dict[str, Any]]:
        """Every rank started while tracing from #0 carries the trace (none while resuming a world)."""
        if self.world is not None:
            return {}
        return {rank: {PROBE_SETTING: self.request(rank)} for rank in range(self.ranks)}

    def is_probed(self, world: World) -> bool:
        """No checkpoint of a traced process: the traced world's, or any while ranks start traced."""
        return self.world is None or self.world is world

    def on_resume(self, world: World, live: Any) -> None:
        if self.world is not world or self.asked:
            return
        self.asked = True
        for rank in sorted(live.sockets):
            live.send(rank, {"kind": "probe", **self.request(rank)})

    def note(self, rank: int, message: dict[str, Any]) -> None:
        if message.get("step") != self.step:
            return
        if message.get("refused"):
            self.refused.setdefault(rank, str(message["refused"]))
        records = message.get("ops")
        if isinstance(records, list):
            kept = self.ops.setdefault(rank, [])
            kept += records[: max(OPS_PER_RANK_MAX - len(kept), 0)]
        values = message.get("values")
        if isinstance(values, dict) and len(self.values.get(rank, {})) < VALUES_PER_RANK_MAX:
            module, op, occurrence = values["key"]
            decoded = [arrays.decode(wire) for wire in values.get("tensors", [])]
            self.values.setdefault(rank, {})[(str(module), str(op), int(occurrence))] = decoded
        if message.get("done"):
            self.done.add(rank)


@contextlib.contextmanager
def tracing_ops(
    host: Any,
    step: int,
    ranks: int,
    world: World | None = None,
    capture: dict[int, list[list[Any]]] | None = None,
    *,
    whole_step: bool = True,
) -> Iterator[OpsProbe]:
    """While active, ``host``'s re-execution traces the ops of ``step`` on each of ``ranks`` ranks;
    yields the probe."""
    assert host.probe is None, "one probe at a time per host"
    probe = OpsProbe(step, ranks, world, capture, whole_step=whole_step)
    host.probe = probe
    try:
        yield probe
    finally:
        host.probe = None


__all__ = ["OpsProbe", "tracing_ops"]
