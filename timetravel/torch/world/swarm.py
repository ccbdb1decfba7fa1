"""The corruptor swarm: ``--set faults=swarm`` draws each seed's bit flips (coordinator side, at t=0).

"Which flips would my training stack have missed?" is a sweep: every seed draws one to ``faults_max``
``corrupt`` records — a target rank, a start in ``[faults_from, faults_window)``, a side (the rank's
contribution to its next collective, or the result it receives) and a bit (0–31: mantissa, exponent or
sign of a float32; a narrower dtype flips that bit modulo its width) — and the run's detectors, with
``silent_corruption`` last (world/silent.py), sort the seeds: ``nan`` or ``divergence`` (a detector
caught the flip), ``silent_corruption`` (it changed the weights and nothing noticed), or pass (the flip
hit a value the model never used). ``timetravel fuzz torch --set faults=swarm`` buckets them, and the
schedule of any seed is a list of records (``timetravel faults``), which a minimizer or a branch edits
like any other.

Every draw is a world-level choice at a ``fault.swarm.*`` site, in a fixed order, before the first
event, so a seed draws the same schedule every time; value 0 is the milder one (one record, the
contribution side, the lowest bit). The element a flip hits is drawn when it acts (the choice
``fault.<id>.element``: the tensor's size is known only then).
"""

from __future__ import annotations

from typing import Any

from timetravel.sim.choices import choose_world
from timetravel.sim.scenario import ConfigError
from timetravel.sim.world import World
from timetravel.torch.world.faults import parse_faults

SIDES = ("contribution", "result")
BITS = 32
"""Bits a swarm flip chooses among (a float32's: 0–22 mantissa, 23–30 exponent, 31 sign)."""


def draw(world: World, ranks: int) -> list[dict[str, Any]]:
    """This seed's corrupt records (ids f1..fn), checked as an explicit schedule is."""
    config = world.config
    if config["faults_max"] == 0:
        return []
    count = 1 + choose_world(world, "fault.swarm.count", config["faults_max"])
    start, window = config["faults_from"], config["faults_window"]
    if start >= window:
        raise ConfigError(f"config key 'faults_from': {start} ns is not before faults_window ({window} ns)")
    records = []
    for number in range(1, count + 1):
        target = choose_world(world, "fault.swarm.target", ranks)
        t_start = start + choose_world(world, "fault.swarm.start", window - start)
        side = SIDES[choose_world(world, "fault.swarm.corrupt.side", len(SIDES))]
        bit = choose_world(world, "fault.swarm.corrupt.bit", BITS)
        records.append(
            {
                "id": f"f{number}",
                "kind": "corrupt",
                "target": f"r{target}",
                "t_start": t_start,
                "params": {"side": side, "bit": bit},
            }
        )
    return parse_faults(records, ranks)
