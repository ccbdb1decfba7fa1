"""Recording one run to a new file: where it goes by default, and ``record_run`` (the
:class:`~timetravel.recording.recorder.Recorder` it drives); recording over a file that exists is
refused unless ``force`` (recording/replace.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from timetravel.recording.format import RECORDING_SUFFIX, RECORDINGS_FOLDER_DEFAULT
from timetravel.recording.recorder import SNAPSHOT_EVERY_EVENTS_DEFAULT, Recorder, check_snapshot_interval
from timetravel.recording.replace import check_replaceable
from timetravel.sim.launch import Launch
from timetravel.sim.runner import build_world, finished_report
from timetravel.sim.scenario import Scenario
from timetravel.sim.world import World


def default_recording_path(
    scenario_name: str, seed: int, folder: str | Path = RECORDINGS_FOLDER_DEFAULT
) -> Path:
    """``recordings/<scenario>-<seed>.ttr``."""
    return Path(folder) / f"{scenario_name}-{seed}{RECORDING_SUFFIX}"


def record_run(
    scenario: Scenario,
    config: dict[str, Any],
    seed: int,
    path: str | Path,
    *,
    until_ns: int | None = None,
    max_events: int | None = None,
    snapshot_every_events: int | None = None,
    record_choices: bool = False,
    determinism: str | None = None,
    force: bool = False,
    launch: Launch | None = None,
    max_record_bytes: int | None = None,
) -> tuple[dict[str, Any], World]:
    """Run one seed while recording it to ``path``; the report has ``run --json``'s fields.

    ``snapshot_every_events`` None: the scenario's own interval (``Scenario.snapshot_every_events``:
    a torch run's is small, each re-executed event may be a training step), else the default —
    as ``timetravel run --record`` chooses.
    ``determinism``: the guard's mode (None: the scenario's own), stored in the header so that
    replays run under the same mode. ``force``: record over a file that exists at ``path``, else it
    is refused before the world is built (recording/replace.py). ``launch``: what the user named
    (sim/launch.py: a torch run's script). ``max_record_bytes``: keep the file within this many
    bytes, thinning the states it keeps of the past (recording/compact.py)."""
    if snapshot_every_events is not None:
        check_snapshot_interval(snapshot_every_events)  # a wrong option first, then the file
    check_replaceable(path, force=force)
    world = build_world(scenario, config, seed, launch)
    recorder = Recorder(
        scenario,
        world,
        path,
        snapshot_every_events=snapshot_every_events
        or scenario.snapshot_every_events
        or SNAPSHOT_EVERY_EVENTS_DEFAULT,
        record_choices=record_choices,
        determinism=determinism,
        launch=launch,
        replace=force,
        max_record_bytes=max_record_bytes,
    )
    result, end = recorder.run_to_end(until_ns, max_events)
    report = finished_report(
        scenario, config, seed, recorder.simulation, result, end["state_hash"], end["hash_chain"]
    )
    report["recording"] = {
        "path": str(recorder.path),
        "bytes": recorder.writer.offset,
        "snapshots": len(recorder.writer.catalog.manifests.get(recorder.branch, [])),
        "snapshot_every_events": recorder.snapshot_every_events,
        "notes": recorder.notes,
    }
    return report, world
