"""The recording commands as a user runs them: run --record, replay, inspect, and their errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from timetravel.cli import main
from timetravel.explore import Session

GOSSIP = ["gossip", "--seed", "4", "--set", "nodes=24", "--set", "rumors=6"]


def run_in_process(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_run_record_writes_the_default_path_and_reports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _err = run_in_process(capsys, "run", *GOSSIP, "--record", "--json")
    report = json.loads(out)
    assert code == 0
    assert report["recording"]["path"] == "recordings/gossip-4.ttr"
    assert (tmp_path / "recordings" / "gossip-4.ttr").stat().st_size == report["recording"]["bytes"]
    code, plain, _err = run_in_process(capsys, "run", *GOSSIP)
    assert code == 0 and f"state_hash {report['state_hash']}" in plain


def test_replay_and_inspect_a_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "g.ttr")
    assert run_in_process(capsys, "run", *GOSSIP, "--record", path, "--snapshot-every", "256")[0] == 0
    code, out, _err = run_in_process(capsys, "replay", path, "--json")
    replay = json.loads(out)
    assert code == 0
    assert replay["verified"] is True and replay["first_mismatch"] is None and replay["cause"] is None
    assert replay["events"] == replay["events_recorded"] > 0
    code, out, _err = run_in_process(capsys, "inspect", path, "--at", "2.5ms", "--path", "nodes/n3", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["at_ns"] == 2_500_000 and shown["path"] == "nodes/n3"
    with Session.open(path) as session:
        session.goto(2_500_000)
        assert shown["state_hash"] == session.state_hash()
        assert shown["events"] == session.position.events
        seen = session.world.nodes["n3"]["seen"]
    assert shown["value"]["seen"] == {
        "array": "bool",
        "shape": [6],
        "size": 6,
        "min": float(seen.min()),
        "max": float(seen.max()),
        "mean": float(seen.mean()),
        "first": [bool(value) for value in seen],
    }
    code, out, _err = run_in_process(capsys, "inspect", path, "--at", "#100")
    assert code == 0 and "(event #100)" in out.splitlines()[0]
    code, out, _err = run_in_process(
        capsys, "inspect", path, "--at", "#100", "--path", "nodes/*/received", "--json"
    )
    received = json.loads(out)["value"]
    with Session.open(path) as session:
        session.goto("#100")
        nodes = session.world.nodes
        counts = [
            (f"nodes/{name}/received", state["received"]) for name, state in nodes.items() if name != "load"
        ]
    assert len(counts) == 24
    assert received == {**dict(counts[:20]), "...": "4 more"}


def test_replay_of_a_nondeterministic_recording_exits_1_and_names_the_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "n.ttr")
    target = "scenario_fixtures:NONDETERMINISTIC"
    assert (
        run_in_process(
            capsys, "run", "nondeterministic", "--scenario", target, "--set", "ticks=400", "--record", path
        )[0]
        == 0
    )
    code, out, _err = run_in_process(capsys, "replay", path, "--scenario", target)
    assert code == 1
    assert "MISMATCH" in out and "cause: determinism_bug" in out
    code, _out, err = run_in_process(capsys, "inspect", path, "--scenario", target, "--at", "end")
    assert code == 0, err


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "g.ttr"
    assert run_in_process(capsys, "run", *GOSSIP, "--record", str(path))[0] == 0
    corrupt = bytearray(path.read_bytes())
    corrupt[len(corrupt) // 2] ^= 0x40
    damaged = tmp_path / "damaged.ttr"
    damaged.write_bytes(bytes(corrupt))
    cases = [
        ("replay", str(damaged)),
        ("inspect", str(path), "--path", "nodes/nobody"),
        ("inspect", str(path), "--at", "yesterday"),
        ("replay", str(tmp_path / "missing.ttr")),
        ("replay", str(path), "--scenario", "scenario_fixtures:FLOATS"),
    ]
    for argv in cases:
        code, _out, err = run_in_process(capsys, *argv)
        assert code == 2, (argv, err)
        assert err.startswith("timetravel: error: ") and err.count("\n") == 1, (argv, err)
    code, _out, err = run_in_process(capsys, "run", *GOSSIP, "--record", str(path), "--snapshot-every", "3")
    assert code == 2 and "at least 64" in err


def test_a_truncated_recording_warns_and_still_opens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "g.ttr"
    assert run_in_process(capsys, "run", *GOSSIP, "--record", str(path), "--snapshot-every", "256")[0] == 0
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    code, out, err = run_in_process(capsys, "inspect", str(path), "--json")
    assert code == 0
    assert "warning" in err and "truncated" in err and "end was not recorded" in err
    assert json.loads(out)["events"] > 0


def test_the_same_seed_records_byte_identical_files_under_any_hash_seed(tmp_path: Path, run_cli: Any) -> None:
    """Nothing that reaches the file may depend on set or hash order (a set of dirty nodes once did)."""
    paths = []
    for hash_seed in ("0", "4242"):
        path = tmp_path / f"needle-{hash_seed}.ttr"
        completed = run_cli(
            "run",
            "needle",
            "--seed",
            "0",
            "--set",
            "decoys=6",
            "--record",
            str(path),
            env={"PYTHONHASHSEED": hash_seed},
        )
        assert completed.returncode in (0, 1), completed.stderr
        paths.append(path)
    assert paths[0].read_bytes() == paths[1].read_bytes()
