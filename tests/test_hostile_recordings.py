"""Hostile recordings (tests/hostile_corpus.py) over inspect, replay, shell -c and tui --headless.

Every command runs in one subprocess under a 512 MiB address-space limit (so under 512 MiB RSS) (tests/hostile_runner.py)
and must say one line: exit code 2 with ``timetravel: error: ...`` naming the frame and offset for
a file it cannot read, exit code 1 from ``replay`` for a file whose frames contradict the run, and
never a traceback. Opening commands warn about event batches with gaps, duplicates or reordering.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hostile_corpus import corpus

from timetravel.recording import record_run
from timetravel.scenarios import get_scenario

MEMORY_BYTES_MAX = 512 << 20
COMMAND_SECONDS_MAX = 10.0
RUNNER = Path(__file__).with_name("hostile_runner.py")

UNREADABLE = {
    "bomb-declared": "the zstd frame declares 2147483648 bytes, the frame header says 1024",
    "bomb-declared-64g": "the zstd frame declares 68719476736 bytes",
    "bomb-undeclared": "payload is more than the 1024 bytes the header says",
    "bomb-events-honest-size": "payload of 209715200 bytes exceeds the 134217728 bytes",
    "notes-huge": "payload of 209715240 bytes exceeds the 1048576 bytes that frame type may hold",
    "empty-lists": "(CHOICES) at byte",
    "array-shape-huge": "array shape [0, 9223372036854775808] is not valid",
    "end-without-events": "(END) at byte",
    "end-events-string": "field 'events' is not an integer (got 'many')",
    "header-chain-batch-zero": "frame 0 (HEADER) at byte 8: field 'chain_batch_events' is out of range 1..",
    "header-chain-batch-string": "field 'chain_batch_events' is not an integer (got 'x')",
    "header-snapshot-every-string": "field 'snapshot_every_events' is not an integer (got 'x')",
    "header-snapshot-quiet-negative": "field 'snapshot_quiet_ns' is out of range 0..9223372036854775807 (got -1)",
    "header-branch-key-string": "field 'branch_key' is not an integer (got 'x')",
    "events-first-negative": "field 'first' is out of range 0..9223372036854775807 (got -5)",
    "events-first-huge": "field 'first' is out of range 0..9223372036854775807 (got 9223372036854775808)",
    "events-count-string": "field 'count' is not an integer (got 'x')",
    "events-as-string": "field 'events' is not bytes (got 'not bytes')",
    "manifest-events-negative": "field 'events' is out of range 0..9223372036854775807 (got -1)",
    "flip-40": "frame 0 (HEADER) at byte 8: checksum mismatch",
    "nested-header-1000": "frame 0 (HEADER) at byte 8: nested more than 128 deep",
    "nested-note-1000": "nested more than 128 deep",
}
FORGED = {
    "events-forged": "do not hash to its stored chain digest",
    "failure-forged": "a FAILURE frame says",
    "end-outcome-forged": "the END frame's outcome is",
    "events-dropped": "a gap: events #4097..#8192 have no EVENTS frame",
    "events-dropped-indexed": "a gap: events #4097..#8192 have no EVENTS frame",
    "events-swapped": "out of order",
    "events-duplicated": "a duplicate",
}
FRONT_END_SAMPLE = (
    "nested-header-1000",
    "nested-note-1000",
    "nested-events-1000",
    "bomb-declared",
    "empty-lists",
    "end-without-events",
    "header-chain-batch-zero",
    "events-dropped",
    "events-swapped",
    "failure-forged",
)
"""The files the default run also opens with ``shell -c`` and ``tui --headless`` (the slow run: all)."""
INCONSISTENT = {
    "events-dropped": "a gap",
    "events-dropped-indexed": "a gap",
    "events-swapped": "out of order",
    "events-duplicated": "a duplicate",
}


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The corpus made from a 10,001-event pingpong recording (three chain batches)."""
    folder = tmp_path_factory.mktemp("hostile")
    scenario = get_scenario("pingpong")
    config = scenario.resolve_config({"rounds": 5000})
    source = folder / "source.ttr"
    record_run(scenario, config, 1, source, snapshot_every_events=4096)
    return dict(corpus(source, folder / "corpus"))


def run_commands(argvs: list[list[str]]) -> list[dict[str, Any]]:
    completed = subprocess.run(
        [sys.executable, str(RUNNER), str(MEMORY_BYTES_MAX), str(COMMAND_SECONDS_MAX), json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parent,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    results: list[dict[str, Any]] = json.loads(completed.stdout.splitlines()[-1])
    return results


def commands_for(path: Path, *, front_ends: bool) -> list[list[str]]:
    commands = [["inspect", str(path)], ["replay", str(path)]]
    if front_ends:
        commands += [["shell", str(path), "-c", "goto end; print clock"], ["tui", str(path), "--headless"]]
    return commands


def run_matrix(hostile_files: dict[str, Path], *, everything: bool) -> dict[tuple[str, str], dict[str, Any]]:
    """{(file, command): result} of the commands on the hostile files, in one subprocess."""
    argvs = [
        argv
        for name, path in hostile_files.items()
        for argv in commands_for(path, front_ends=everything or name in FRONT_END_SAMPLE)
    ]
    names = {str(path): name for name, path in hostile_files.items()}
    found = {(names[result["argv"][1]], result["argv"][0]): result for result in run_commands(argvs)}
    assert len(found) == len(argvs)  # none stopped past its time limit
    return found


@pytest.fixture(scope="module")
def results(hostile_files: dict[str, Path]) -> dict[tuple[str, str], dict[str, Any]]:
    return run_matrix(hostile_files, everything=False)


def test_no_command_shows_a_traceback_or_runs_out_of_its_limits(
    results: dict[tuple[str, str], dict[str, Any]],
) -> None:
    check_one_line_results(results)


@pytest.mark.slow
def test_every_command_on_every_hostile_file_is_one_line(hostile_files: dict[str, Path]) -> None:
    check_one_line_results(run_matrix(hostile_files, everything=True))


def check_one_line_results(results: dict[tuple[str, str], dict[str, Any]]) -> None:
    for (name, command), result in results.items():
        assert result["traceback"] is None, f"{name} {command}:\n{result['traceback']}"
        assert result["code"] in (0, 1, 2), (name, command, result)
        assert result["seconds"] < COMMAND_SECONDS_MAX, (name, command, result["seconds"])
        lines = result["stderr"].splitlines()
        errors = [line for line in lines if line.startswith("timetravel: error: ")]
        others = [
            line for line in lines if not line.startswith(("timetravel: error: ", "timetravel: warning: "))
        ]
        assert len(errors) <= 1 and not others, (name, command, lines)
        if result["code"] == 2:
            assert errors, (name, command, lines)


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_an_unreadable_file_is_one_line_naming_frame_field_and_offset(
    results: dict[tuple[str, str], dict[str, Any]], name: str
) -> None:
    for command in ("inspect", "replay", "shell", "tui"):
        result = results.get((name, command))
        if result is None:
            continue  # shell and tui open only FRONT_END_SAMPLE in the default run
        assert result["code"] == 2, (command, result)
        assert UNREADABLE[name] in result["stderr"], (command, result["stderr"])
        assert " at byte " in result["stderr"]


@pytest.mark.parametrize("name", sorted(FORGED))
def test_replay_does_not_call_a_forged_file_verified(
    results: dict[tuple[str, str], dict[str, Any]], name: str
) -> None:
    result = results[(name, "replay")]
    assert result["code"] == 1, result
    assert FORGED[name] in result["stdout"], result["stdout"]
    assert "MISMATCH" in result["stdout"] and " at byte " in result["stdout"]


@pytest.mark.parametrize("name", sorted(INCONSISTENT))
def test_opening_commands_warn_about_inconsistent_event_batches(
    results: dict[tuple[str, str], dict[str, Any]], name: str
) -> None:
    for command in ("inspect", "shell", "tui"):
        if (name, command) not in results:
            continue
        stderr = results[(name, command)]["stderr"]
        assert "timetravel: warning: " in stderr and INCONSISTENT[name] in stderr, (command, stderr)


def test_the_untouched_recording_still_verifies(hostile_files: dict[str, Path]) -> None:
    source = next(iter(hostile_files.values())).parent.parent / "source.ttr"
    [result] = run_commands([["replay", str(source)]])
    assert result["code"] == 0 and "10,001 events verified" in result["stdout"], result


def test_a_branch_does_not_leave_a_phantom_frame_in_the_index(
    hostile_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Appending a branch cut the old INDEX frame from the file but kept it in the catalog: the new
    index listed one frame more than the file held, two of them at one offset."""
    import shutil

    from timetravel.cli import main
    from timetravel.recording import RecordingReader
    from timetravel.recording.format import FRAME_HEADER, FRAME_HEADER_BYTES, MAGIC, TRAILER_BYTES

    source = next(iter(hostile_files.values())).parent.parent / "source.ttr"
    path = tmp_path / "branched.ttr"
    shutil.copy(source, path)
    for seed in ("2", "3"):
        assert main(["branch", str(path), "--at", "1ms", "--branch-seed", seed]) == 0
    capsys.readouterr()
    data = path.read_bytes()
    offset, on_disk = len(MAGIC), []
    while offset < len(data) - TRAILER_BYTES:
        on_disk.append(offset)
        offset += FRAME_HEADER_BYTES + FRAME_HEADER.unpack_from(data, offset)[3]
    with RecordingReader.open(path) as reader:
        assert reader.used_index
        assert [frame_offset for frame_offset, _kind in reader.catalog.frames] == on_disk
        assert reader.verify_frames() == len(on_disk)
    assert main(["replay", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verified"] and report["not_verified"] == ["other branches: b1, b2"]
