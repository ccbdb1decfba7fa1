"""The command language's and the CLI's branch, branches, fanout, likelihood, compare, diff, divergence
and rerun: the same engine calls, the --json objects of the issue, and exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from explore_scenarios import face

from timetravel.cli import main as cli_main
from timetravel.explore import Session
from timetravel.explore import compare_results as cr
from timetravel.explore import results as r
from timetravel.explore.commands import CommandContext, CommandError, render_text, run_line
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario

MS = 1_000_000
NEEDLE_SETTINGS = {"decoys": 5, "rounds": 12, "workers": 4}
FAILURE_KEYS = ["kind", "node", "t_ns", "message", "signature"]


@pytest.fixture(scope="module")
def needle_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    scenario = get_scenario("needle")
    path = tmp_path_factory.mktemp("needle") / "needle.ttr"
    _report, world = record_run(
        scenario, scenario.resolve_config(NEEDLE_SETTINGS), 0, path, snapshot_every_events=64
    )
    return path, [dict(record) for record in world.faults]


@pytest.fixture
def needle(needle_source: Any, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    source, faults = needle_source
    path = tmp_path / "needle.ttr"
    shutil.copy(source, path)
    (restart,) = [record for record in faults if record["kind"] == "restart"]
    return path, restart


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- the command language ---------------------------------------------------------------------------


def test_commands_run_the_engine_from_the_cursor(needle: Any) -> None:
    path, restart = needle
    progress: list[Any] = []
    with Session.open(path) as session:
        context = CommandContext(session=session, progress=progress.append)
        session.goto("19ms")
        made = run_line("branch --set bug=none", context)
        assert isinstance(made, r.BranchResult) and (made.name, made.at_ns, made.outcome) == (
            "b1",
            19 * MS,
            "pass",
        )
        assert "b1" in session.reader.catalog.branches
        assert progress and progress[-1].task == "branch b1"
        run_line(f"branch --at 19 --drop-fault {restart['id']} --name dropped", context)
        compared = run_line("compare main b1", context)
        assert isinstance(compared, cr.CompareResult) and compared.b.outcome == "pass"
        found = run_line("divergence main dropped --go", context)
        assert isinstance(found, cr.Divergence) and found.event_a == session.position.events
        assert render_text(found, "ms")[0].startswith("first divergence at 20.7ms: fault on")
        same = run_line("divergence b1 b1", context)
        assert isinstance(same, cr.CompareResult) and same.first_divergence is None
        diffed = run_line("diff main b1 --at 25 --path nodes/*/total", context)
        assert isinstance(diffed, cr.DiffCommandResult) and diffed.at_ns == 25 * MS and diffed.paths
        fanned = run_line("fanout --at 10 --samples 3", context)
        assert isinstance(fanned, r.FanoutResult) and fanned.samples == 3
        walked = run_line("likelihood --samples 2 --points 2", context)
        assert isinstance(walked, r.LikelihoodResult) and len(walked.points) == 2
        rerun = run_line("rerun --set bug=none", context)
        assert isinstance(rerun, cr.RerunResult) and rerun.outcome == "pass"


@pytest.mark.parametrize(
    "line, message",
    [
        ("branch --at 19 --set workers=2", "branch: config key 'workers' of scenario needle cannot change"),
        ("branch --at 19 --drop-fault f99", "branch: no fault 'f99'"),
        ("branch --at 19 --add-fault kind=drop", "give at least kind=, target= and t_start="),
        ("branch --at 19 --edit-fault f1", "write ID:KEY=VALUE"),
        ("compare main nope", "compare: no branch 'nope'"),
        ("fanout --at 10 --samples 0", "fanout: samples must be"),
        ("rerun --set colour=red", "rerun: unknown config key 'colour'"),
    ],
)
def test_command_errors_are_one_line(needle: Any, line: str, message: str) -> None:
    path, _restart = needle
    with Session.open(path) as session:
        context = CommandContext(session=session)
        with pytest.raises(CommandError, match=message):
            run_line(line, context)
    assert CommandContext().session is None
    with pytest.raises(CommandError, match="no recording is open"):
        run_line("compare main b1", CommandContext())


def test_a_stop_request_is_a_command_error(needle: Any) -> None:
    path, _restart = needle
    with Session.open(path) as session:
        context = CommandContext(session=session, should_stop=lambda: True)
        with pytest.raises(CommandError, match="fanout: stopped"):
            run_line("fanout --at 10 --samples 3", context)


# -- the CLI ------------------------------------------------------------------------------------------


def test_cli_json_objects_are_the_issues(needle: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path, restart = needle
    code, out, _ = cli(capsys, "branch", str(path), "--at", "19", "--set", "bug=none", "--json")
    assert code == 0
    assert json.loads(out) == {
        "name": "b1",
        "parent": "main",
        "at_ns": 19 * MS,
        "outcome": "pass",
        "failure": None,
    }
    code, out, _ = cli(
        capsys, "branch", str(path), "--at", "19ms", "--branch-seed", "3", "--name", "k3", "--json"
    )
    assert code == 0 and list(json.loads(out)) == ["name", "parent", "at_ns", "outcome", "failure"]
    branch_failure = json.loads(out)["failure"]
    assert branch_failure is None or list(branch_failure) == FAILURE_KEYS

    code, out, _ = cli(capsys, "branches", str(path), "--json")
    tree = json.loads(out)
    assert code == 0 and [row["name"] for row in tree["branches"]] == ["main", "b1", "k3"]
    assert tree["branches"][1]["changes"] == ["set bug=none"]

    code, out, _ = cli(capsys, "fanout", str(path), "--at", "10", "--samples", "2", "--json")
    fanout = json.loads(out)
    assert code == 0 and list(fanout) == [
        "at_ns",
        "samples",
        "failure_rate",
        "by_signature",
        "samples_requested",
        "stopped",
    ]
    assert fanout["at_ns"] == 10 * MS and sum(fanout["by_signature"].values()) == 2

    code, out, _ = cli(capsys, "likelihood", str(path), "--samples", "1", "--json")
    assert code == 0 and list(json.loads(out)) == ["branch", "samples", "points", "point_of_no_return_ns"]

    code, out, _ = cli(capsys, "compare", str(path), "main", "b1", "--json")
    compared = json.loads(out)
    assert code == 0 and list(compared) == ["a", "b", "first_divergence", "diff", "metrics"]
    assert compared["a"]["outcome"] == "fail" and compared["b"] == {
        "name": "b1",
        "outcome": "pass",
        "failure": None,
    }
    assert compared["first_divergence"] == {
        "t_ns": restart["t_start"],
        "node": restart["target"],
        "kind": "fault",
        "seq_a": compared["first_divergence"]["seq_a"],
        "seq_b": compared["first_divergence"]["seq_a"],
        "event_a": compared["first_divergence"]["event_a"],
        "event_b": compared["first_divergence"]["event_a"],
    }
    assert isinstance(compared["first_divergence"]["event_a"], int)
    code, out, _ = cli(capsys, "compare", str(path), "main", "b1")
    event = compared["first_divergence"]["event_a"]
    assert f"(a #{event}, b #{event})" in out and "seq" not in out

    code, out, _ = cli(capsys, "diff", str(path), "main", "b1", "--json")
    diffed = json.loads(out)
    assert code == 0 and list(diffed) == ["a", "b", "at_ns", "moment", "paths", "omitted", "first_divergence"]
    assert diffed["first_divergence"] == compared["first_divergence"]
    # issue 15: compare and diff give the same paths at the same moment, and say which moment
    assert compared["diff"] == diffed and diffed["moment"] == "first divergence"
    assert {
        "path": f"nodes/{restart['target']}/applied_round",
        "change": "changed",
        "summary": "-1 -> 5 (+6)",
    } in diffed["paths"]
    code, out, _ = cli(capsys, "diff", str(path), "main", "b1", "--at", "25", "--path", "nodes/w0", "--json")
    assert code == 0 and json.loads(out)["first_divergence"] is None and json.loads(out)["at_ns"] == 25 * MS

    code, out, _ = cli(capsys, "rerun", str(path), "--set", "bug=none", "--json")
    rerun = json.loads(out)
    assert code == 0 and rerun["outcome"] == "pass" and rerun["recorded"]["outcome"] == "fail"
    assert rerun["choices"] == "seed" and rerun["first_divergence"] == compared["first_divergence"]


def test_cli_text_and_exit_codes(needle: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path, _restart = needle
    code, out, _ = cli(capsys, "branch", str(path), "--at", "19", "--set", "bug=none")
    assert code == 0 and out == "b1: from main at 19ms [set bug=none] -> pass\n"
    code, out, _ = cli(capsys, "compare", str(path), "main", "b1")
    lines = out.splitlines()
    assert (
        code == 0 and lines[1] == "b b1: pass" and lines[2].startswith("first divergence at 20.7ms: fault on")
    )
    assert lines[3] == "at 20.7ms (first divergence): 2 paths differ (diff main b1 shows the same)"
    assert lines[6].startswith("metrics (summed over nodes)")
    for args, message in [
        (("branch", str(path), "--at", "19", "--set", "workers=2"), "cannot change in a branch"),
        (("branch", str(path), "--at", "30", "--branch-seed", "1"), "has already failed there"),
        (("branch", str(path), "--at", "soon", "--branch-seed", "1"), "soon"),
        (("compare", str(path), "main", "zz"), "no branch 'zz'"),
        (("diff", str(path), "main", "b1", "--path", "no such"), "path"),
        (("rerun", str(path), "--set", "bug=maybe"), "bug"),
        (("fanout", str(path.parent / "missing.ttr"), "--at", "1"), "missing.ttr"),
    ]:
        code, out, err = cli(capsys, *args)
        assert code == 2 and out == "" and err.startswith("timetravel: error: ") and message in err, (
            args,
            err,
        )
        assert len(err.strip().splitlines()) == 1


def test_cli_branch_help_documents_the_fault_spec(run_cli: Any) -> None:
    done = run_cli("branch", "--help")
    assert done.returncode == 0 and "kind=drop,target=r3,t_start=950ms" in " ".join(done.stdout.split())


def test_cli_on_coin_through_a_subprocess(run_cli: Any, tmp_path: Path) -> None:
    """A user's scenario (``--scenario MODULE:ATTR``) through the real entry point."""
    seed = next(seed for seed in range(100) if face(seed, 0) == 1)
    path = tmp_path / "coin.ttr"
    recorded = run_cli(
        "run",
        "coin",
        "--scenario",
        "tests.explore_scenarios:SCENARIO",
        "--seed",
        str(seed),
        "--record",
        str(path),
        "--snapshot-every",
        "64",
    )
    assert recorded.returncode == 1, recorded.stderr
    key = next(key for key in range(1, 50) if face(seed, key) == 0)
    done = run_cli(
        "branch",
        str(path),
        "--scenario",
        "tests.explore_scenarios:SCENARIO",
        "--at",
        "9",
        "--branch-seed",
        str(key),
        "--json",
    )
    assert done.returncode == 0 and json.loads(done.stdout)["outcome"] == "pass", done.stderr


def test_a_stopped_fanout_says_how_many_of_the_futures_asked_for_ran(needle: Any) -> None:
    path, _restart = needle
    reports: list[Any] = []  # the user presses escape once two futures have ended
    with Session.open(path) as session:
        context = CommandContext(session=session, should_stop=lambda: len(reports) >= 2)
        context.progress = reports.append
        result = run_line("fanout --at 10 --samples 6", context)
    assert result.samples == 2 and result.samples_requested == 6 and result.stopped
    data = result.to_data()
    assert data["samples"] == 2 and data["samples_requested"] == 6 and data["stopped"] is True
    heading = render_text(result, "ms")[0]
    assert heading.startswith("2 of 6 futures from 10ms (stopped): failure rate ")


def test_a_fanout_that_ran_every_future_is_not_stopped(needle: Any) -> None:
    path, _restart = needle
    with Session.open(path) as session:
        result = run_line("fanout --at 10 --samples 2", CommandContext(session=session))
    assert result.samples == 2 and not result.stopped
    assert render_text(result, "ms")[0].startswith("2 futures from 10ms: failure rate ")


def test_progress_never_reads_past_its_total() -> None:
    from timetravel.explore.work import WorkProgress

    report = WorkProgress("branch b1", 8192, 4793)
    assert (report.done, report.total, report.fraction) == (8192, 8192, 1.0)
    assert WorkProgress("branch b1", 100, 4793).total == 4793


def test_a_branch_that_outruns_its_parent_reports_progress_within_its_total(needle: Any) -> None:
    from timetravel.explore.branching import branch

    path, restart = needle
    reports: list[Any] = []
    with Session.open(path) as session:
        branch(session, "#1", {"drop_faults": [restart["id"]]}, progress=reports.append)
    assert reports and all(report.done <= report.total for report in reports)
