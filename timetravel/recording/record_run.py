"""Recording one run to a new file: where it goes by default, the refusal to record over work,
and ``record_run`` (the :class:`~timetravel.recording.recorder.Recorder` it drives)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from timetravel.recording.format import RECORDING_SUFFIX, RECORDINGS_FOLDER_DEFAULT, RecordingError
from timetravel.recording.recorder import SNAPSHOT_EVERY_EVENTS_DEFAULT, Recorder
from timetravel.sim.launch import Launch
from timetravel.sim.runner import build_world, finished_report
from timetravel.sim.scenario import Scenario
from timetravel.sim.world import World

BRANCHES_NAMED_MAX = 5
"""Branches a refusal to record over a recording names (the rest are counted)."""


def default_recording_path(
    scenario_name: str, seed: int, folder: str | Path = RECORDINGS_FOLDER_DEFAULT
) -> Path:
    """``recordings/<scenario>-<seed>.ttr``."""
    return Path(folder) / f"{scenario_name}-{seed}{RECORDING_SUFFIX}"


def check_replaceable(path: str | Path, *, force: bool = False) -> None:
    """Refuse to record over ``path`` when that would lose work: a recording still being written
    (always), or one that holds branches (unless ``force``: ``run --record --force``).

    Recording replaces the whole file, and branches live in the recording they branch from, so
    ``run --record`` over a recording someone explored used to delete its branches without a
    word. A file that is not a readable recording is left to the writer (it is replaced)."""
    from timetravel.recording.reader import RecordingReader

    target = Path(path)
    if not target.is_file():
        return
    try:
        reader = RecordingReader.open(target)
    except RecordingError:
        return
    with reader:
        in_progress = reader.in_progress
        branches = list(reader.catalog.branches)
    if in_progress:
        raise RecordingError(f"{target}: another process is writing this recording (it is in progress)")
    if branches and not force:
        shown = ", ".join(branches[:BRANCHES_NAMED_MAX]) + (
            ", ..." if len(branches) > BRANCHES_NAMED_MAX else ""
        )
        raise RecordingError(
            f"{target} holds {len(branches)} branch{'es' if len(branches) != 1 else ''} ({shown}) that "
            "recording over it would delete: record to another path, or pass --force to replace it"
        )


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
) -> tuple[dict[str, Any], World]:
    """Run one seed while recording it to ``path``; the report has ``run --json``'s fields.

    ``snapshot_every_events`` None: the scenario's own interval (``Scenario.snapshot_every_events``:
    a torch run's is small, each re-executed event may be a training step), else the default —
    as ``timetravel run --record`` chooses.
    ``determinism``: the guard's mode (None: the scenario's own), stored in the header so that
    replays run under the same mode. ``force``: replace a recording that holds branches
    (``check_replaceable``). ``launch``: what the user named (sim/launch.py: a torch run's script)."""
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
