"""export --perfetto: Chrome trace events whose structure Perfetto reads, and whose content is the run.

Structure: every trace event has the fields its phase needs (ph, ts, dur, pid, tid), timestamps are
monotone on every track, flows pair up. Content: kernels, messages and faults are checked against
what the scenario does by construction (fabric_example: three kernels per rank and step, a gradient
from every rank to every other) and against the recorded events.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from branch_writing import append_branch, world_at
from fabric_example import BACKWARD_NS, SCENARIO, UPDATE_NS

from timetravel.cli import main as cli_main
from timetravel.explore import Session
from timetravel.explore.perfetto import THREADS_PER_PROCESS, export_perfetto, trace_timestamp
from timetravel.recording import record_run

RANKS = 8
STEPS = 3


def record(
    tmp_path: Path, name: str = "example", seed: int = 1, **settings: Any
) -> tuple[Path, dict[str, Any]]:
    path = tmp_path / f"{name}.ttr"
    report, _ = record_run(SCENARIO, SCENARIO.resolve_config(settings), seed, path, snapshot_every_events=64)
    return path, report


def export(path: Path, out: Path, **options: Any) -> tuple[dict[str, Any], Any]:
    with Session.open(path, scenario=SCENARIO) as session:
        result = export_perfetto(session, out, **options)
    return json.loads(out.read_text()), result


def trace_events(document: dict[str, Any], category: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in document["traceEvents"]
        if e["ph"] != "M" and (category is None or e.get("cat") == category)
    ]


def ns(value: float) -> int:
    """How Perfetto reads a trace timestamp: int64(ts * 1000)."""
    return int(value * 1000)


def check_structure(document: dict[str, Any]) -> None:
    """What Perfetto's JSON importer needs, and monotone timestamps per track."""
    assert set(document) >= {"traceEvents", "displayTimeUnit"}
    last_on_track: dict[tuple[int, int], float] = {}
    names: dict[str, set[int]] = defaultdict(set)
    for event in document["traceEvents"]:
        assert event["ph"] in {"M", "X", "i"}
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}
            names[event["name"]].add(event["tid"] if event["name"].startswith("thread") else event["pid"])
            continue
        assert isinstance(event["ts"], float | int) and event["ts"] >= 0 and isinstance(event["name"], str)
        if event["ph"] == "X":
            assert isinstance(event["dur"], float | int) and event["dur"] >= 0
        else:
            assert event["s"] in {"t", "g"}
        if event["ph"] == "X" or event["s"] == "t":
            track = (event["pid"], event["tid"])
            assert event["ts"] >= last_on_track.get(track, 0.0), f"time goes back on track {track}"
            last_on_track[track] = event["ts"]
            assert event["tid"] in names["thread_name"] and event["pid"] in names["process_name"]
            assert event["tid"] // THREADS_PER_PROCESS == event["pid"]


def test_timestamps_read_back_as_exact_nanoseconds() -> None:
    rng = random.Random(5)
    for t_ns in [0, 1, 999, 1001, 1_035_700, 2**40 + 7, *(rng.randrange(0, 2**45) for _ in range(5000))]:
        assert ns(trace_timestamp(t_ns)) == t_ns
        assert abs(trace_timestamp(t_ns) - t_ns / 1000) <= 1e-9 * max(1.0, t_ns / 1000)


def test_the_fabric_example_exports_kernels_messages_and_processes(tmp_path: Path) -> None:
    path, report = record(tmp_path)
    document, result = export(path, tmp_path / "trace.json")
    check_structure(document)
    assert (result.events, result.truncated) == (report["events"], False)
    processes = {e["pid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    assert list(processes.values()) == [
        f"r{rank} (host {rank // 4})" for rank in range(RANKS)
    ]  # 4 GPUs a host
    threads = Counter(e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name")
    assert threads == {"events": RANKS, "stream compute": RANKS, "stream comm": RANKS}
    # one slice per recorded event, in order, on the node that handled it
    handled = trace_events(document, "event")
    assert sorted(e["args"]["event"] for e in handled) == list(range(1, report["events"] + 1))
    with Session.open(path, scenario=SCENARIO) as session:
        for slice_event in handled:
            recorded = session.event(slice_event["args"]["event"])
            assert recorded is not None
            assert (slice_event["name"], ns(slice_event["ts"]), slice_event["args"]["seq"]) == (
                recorded.kind,
                recorded.t_ns,
                recorded.seq,
            )
            assert processes[slice_event["pid"]].split()[0] == recorded.node


def test_kernel_spans_follow_the_streams(tmp_path: Path) -> None:
    path, _ = record(tmp_path)
    document, result = export(path, tmp_path / "trace.json")
    kernels = trace_events(document, "kernel")
    assert result.kernels == len(kernels) == RANKS * STEPS * 3
    by_track: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for kernel in kernels:
        by_track[(kernel["pid"], kernel["args"]["stream"])].append(kernel)
    done_times = _gpu_done_times(path)
    for (pid, stream), spans in by_track.items():
        names = [span["name"] for span in spans]
        assert names == (["backward", "update"] * STEPS if stream == "compute" else ["allreduce"] * STEPS)
        for span in spans:
            start, end = span["args"]["start_ns"], span["args"]["end_ns"]
            assert (ns(span["ts"]), ns(span["ts"]) + ns(span["dur"])) == (start, end)
            assert end in done_times[pid]  # a span ends at a recorded completion of that rank
            if span["name"] == "backward":
                assert end - start in (BACKWARD_NS, BACKWARD_NS + 1)  # +1 ns: a completion-order flip
            if span["name"] == "update":
                assert end - start in (UPDATE_NS, UPDATE_NS + 1)
        for earlier, later in itertools.pairwise(spans):
            assert earlier["args"]["end_ns"] <= later["args"]["start_ns"]  # FIFO within a stream
    for pid in {pid for pid, _ in by_track}:
        compute, comm = by_track[(pid, "compute")], by_track[(pid, "comm")]
        for step in range(STEPS):
            backward, update, allreduce = compute[2 * step], compute[2 * step + 1], comm[step]
            assert allreduce["args"]["start_ns"] >= backward["args"]["end_ns"]  # waits for grad_ready
            assert update["args"]["start_ns"] >= allreduce["args"]["end_ns"]  # waits for reduced


def test_the_missing_wait_shows_an_update_that_overlaps_the_allreduce(tmp_path: Path) -> None:
    path, report = record(tmp_path, bug="missing_wait", race_detector=False)
    assert report["failure"]["kind"] == "divergence"
    document, _ = export(path, tmp_path / "trace.json")
    kernels = trace_events(document, "kernel")
    for pid in {k["pid"] for k in kernels}:
        reduces = [k for k in kernels if k["pid"] == pid and k["name"] == "allreduce"]
        updates = [k for k in kernels if k["pid"] == pid and k["name"] == "update"]
        # the first update ran while the gradient was still being reduced: the race, drawn
        assert updates[0]["args"]["start_ns"] < reduces[0]["args"]["end_ns"]
    failures = trace_events(document, "failure")
    assert [f["name"] for f in failures] == [f"FAIL {report['failure']['signature']}"]


def test_messages_are_flows_from_sender_to_receiver(tmp_path: Path) -> None:
    path, _ = record(tmp_path)
    document, result = export(path, tmp_path / "trace.json")
    outgoing = {e["bind_id"]: e for e in trace_events(document) if e.get("flow_out")}
    incoming = {e["bind_id"]: e for e in trace_events(document) if e.get("flow_in")}
    assert result.messages == len(outgoing) == len(incoming) == RANKS * (RANKS - 1) * STEPS
    assert outgoing.keys() == incoming.keys()
    for bind_id, send in outgoing.items():
        receive = incoming[bind_id]
        assert receive["name"] == "grad" and send["pid"] != receive["pid"]
        assert send["name"] == f"send grad -> {_node(document, receive['pid'])}"
        assert ns(send["ts"]) == receive["args"]["sent_ns"] <= ns(receive["ts"])
        assert _node(document, send["pid"]) == receive["args"]["from"]


def test_faults_are_instant_events_on_their_target(tmp_path: Path) -> None:
    faults = [
        {"kind": "crash", "target": "r2", "t_start": 30_000, "t_end": 60_000},
        {"kind": "delay", "target": "r5", "t_start": 0, "t_end": 500_000, "params": {"delay_ns": 1000}},
    ]
    path, report = record(tmp_path, faults=faults)
    assert report["outcome"] == "pass"  # survivable
    document, result = export(path, tmp_path / "trace.json")
    check_structure(document)
    instants = sorted(
        (e["name"], _node(document, e["pid"]), ns(e["ts"])) for e in trace_events(document, "fault")
    )
    assert instants == [
        ("fault f1 crash end", "r2", 60_000),
        ("fault f1 crash start", "r2", 30_000),
        ("fault f2 delay end", "r5", 500_000),
        ("fault f2 delay start", "r5", 0),
    ]
    assert result.faults == 4
    lost = [k for k in trace_events(document, "kernel") if "lost" in k["args"]]
    assert [(_node(document, k["pid"]), k["name"], k["args"]["end_ns"]) for k in lost] == [
        ("r2", "backward", 30_000)
    ]


def test_gossip_exports_without_a_gpu_and_truncates_at_its_bound(
    gossip_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, report = gossip_recording
    with Session.open(path) as session:
        result = export_perfetto(session, tmp_path / "gossip.json")
        document = json.loads((tmp_path / "gossip.json").read_text())
        check_structure(document)
        rumors = sum(1 for n in range(1, report["events"] + 1) if session.event(n).kind == "rumor")  # type: ignore[union-attr]
        assert (result.kernels, result.faults, result.messages) == (0, 0, rumors)
        small = export_perfetto(session, tmp_path / "small.json", trace_events_max=500)
    assert small.truncated and small.events < report["events"] and 500 <= small.trace_events < 510
    check_structure(json.loads((tmp_path / "small.json").read_text()))


def test_the_export_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, report = record(tmp_path)
    out = tmp_path / "cli.json"
    code = cli_main(
        ["export", str(path), "--perfetto", str(out), "--scenario", "fabric_example:SCENARIO", "--json"]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["path"] == str(out) and printed["events"] == report["events"]
    assert printed["bytes"] == out.stat().st_size
    assert (
        cli_main(
            [
                "export",
                str(path),
                "--perfetto",
                str(out),
                "--branch",
                "b7",
                "--scenario",
                "fabric_example:SCENARIO",
            ]
        )
        == 2
    )
    assert "no branch 'b7' (branches: main)" in capsys.readouterr().err


def _node(document: dict[str, Any], pid: int) -> str:
    names = {e["pid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    return str(names[pid].split()[0])


def _gpu_done_times(path: Path) -> dict[int, set[int]]:
    times: dict[int, set[int]] = defaultdict(set)
    with Session.open(path, scenario=SCENARIO) as session:
        order = list(session.world.nodes)
        for number in range(1, session.end.events + 1):
            event = session.event(number)
            assert event is not None
            if event.kind == "gpu.done":
                times[order.index(event.node) + 1].add(event.t_ns)
    return times


def test_a_branch_exports_its_parent_s_prefix_and_its_own_future(gossip_copy: Path, tmp_path: Path) -> None:
    from timetravel.scenarios import get_scenario

    world = world_at(gossip_copy, 700)
    world.branch_key = 1
    end = append_branch(gossip_copy, get_scenario("gossip"), world, 700)
    with Session.open(gossip_copy, branch="b1") as branch:
        result = export_perfetto(branch, tmp_path / "b1.json")
        document = json.loads((tmp_path / "b1.json").read_text())
        check_structure(document)
        assert result.events == end["events"] and not result.truncated
        handled = sorted(trace_events(document, "event"), key=lambda e: e["args"]["event"])
        assert [e["args"]["event"] for e in handled] == list(range(1, end["events"] + 1))
        for slice_event in handled[695:710]:  # across the fork, the branch's own events after it
            recorded = branch.event(slice_event["args"]["event"])
            assert recorded is not None and (slice_event["args"]["seq"], ns(slice_event["ts"])) == (
                recorded.seq,
                recorded.t_ns,
            )
        assert document["otherData"]["branch"] == "b1"
