"""The command line as users and scripts meet it: JSON shape, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

RunCli = Callable[..., subprocess.CompletedProcess[str]]

RUN_JSON_FIELDS = {
    "scenario",
    "seed",
    "config",
    "outcome",
    "failure",
    "events",
    "t_end_ns",
    "state_hash",
    "hash_chain",
    "code_fingerprint",
    "platform_fingerprint",
    "wall_s",
}


def test_run_json_prints_exactly_one_object_with_every_field(run_cli: RunCli) -> None:
    completed = run_cli("run", "pingpong", "--seed", "1", "--json")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert set(report) >= RUN_JSON_FIELDS
    assert report["scenario"] == "pingpong" and report["seed"] == 1 and report["outcome"] == "pass"
    assert report["failure"] is None and report["events"] == 2001
    assert len(report["state_hash"]) == 32 and len(report["hash_chain"]) == 32
    assert report["summary"]["rounds"] == 1000


def test_a_simulated_failure_exits_1_and_prints_the_command_that_reproduces_it(run_cli: RunCli) -> None:
    completed = run_cli("run", "pingpong", "--seed", "1", "--set", "rtt_max=2300ns")
    assert completed.returncode == 1
    assert "outcome: FAIL  assertion on ping" in completed.stdout
    assert "reproduce: timetravel run pingpong --seed 1 --set rtt_max=2300ns" in completed.stdout
    again = run_cli("run", "pingpong", "--seed", "1", "--set", "rtt_max=2300ns", "--json")
    assert again.returncode == 1
    failure = json.loads(again.stdout)["failure"]
    assert list(failure)[:5] == ["kind", "node", "t_ns", "message", "signature"]  # then what else it recorded
    assert failure["signature"] == "assertion:pingpong.rtt_max" and failure["site"] == "pingpong.rtt_max"
    assert "reproduce: timetravel run pingpong" in again.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("run", "nope"), "unknown scenario 'nope'"),
        (("run", "pingpong", "--set", "rounds=abc"), "config key 'rounds'"),
        (("run", "pingpong", "--set", "bogus=1"), "unknown config key 'bogus'"),
        (("run", "pingpong", "--set", "rounds"), "key=value"),
        (("run", "pingpong", "--until", "soon"), "not a time"),
        (("run", "pingpong", "--seed", "x"), "invalid int value"),
        (("run", "pingpong", "--scenario", "no.such.module:S"), "cannot import"),
        (("frobnicate",), "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(run_cli: RunCli, args: tuple[str, ...], needle: str) -> None:
    completed = run_cli(*args)
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1, completed.stderr
    assert completed.stderr.startswith("timetravel: error: ")
    assert needle in completed.stderr
    assert "Traceback" not in completed.stderr


def test_until_stops_the_run_at_that_time(run_cli: RunCli) -> None:
    completed = run_cli("run", "pingpong", "--until", "0.5", "--json")
    report = json.loads(completed.stdout)
    assert report["t_end_ns"] == 500_000 and report["outcome"] == "pass"


def test_scenarios_lists_builtins_and_their_keys(run_cli: RunCli) -> None:
    listing = run_cli("scenarios", "--json")
    names = [row["name"] for row in json.loads(listing.stdout)]
    assert names[:2] == ["pingpong", "gossip"]
    keys = run_cli("scenarios", "gossip")
    assert "coverage_min" in keys.stdout and "default 1ms" in keys.stdout


def test_help_explains_the_commands(run_cli: RunCli) -> None:
    completed = run_cli("run", "--help")
    assert completed.returncode == 0
    assert "Exit code 0 when it passes, 1 when" in " ".join(completed.stdout.split())


def test_bench_kernel_quick_reports_the_documented_figures(run_cli: RunCli) -> None:
    completed = run_cli("bench", "kernel", "--quick", "--json")
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["bench"] == "kernel"
    for figure in (
        "timeout_events_per_s",
        "timeout_ratio_vs_simpy",
        "timeout_events_per_s_chain_off",
        "pingpong_messages_per_s",
        "pingpong_ratio_vs_simpy",
        "cli_startup_ms",
        "bfloat16_import_ms",
    ):
        assert result["figures"][figure] > 0
