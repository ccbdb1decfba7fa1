"""A RecordingWriter on a new file whose header is a small gossip world's (4 nodes, seed 1), for the
tests of what the writer puts in a file."""

from __future__ import annotations

from pathlib import Path

from timetravel.recording.recorder import recording_header
from timetravel.recording.writer import RecordingWriter
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import build_world


def gossip_writer(path: Path, chain_batch_events: int = 4096) -> RecordingWriter:
    """A writer creating ``path``: a snapshot every 256 events, the hash chain in batches of
    ``chain_batch_events``."""
    scenario = get_scenario("gossip")
    world = build_world(scenario, scenario.resolve_config(["nodes=4"]), 1)
    header = recording_header(
        scenario, world, snapshot_every_events=256, chain_batch_events=chain_batch_events, overrides=None
    )
    return RecordingWriter.create(path, header)
