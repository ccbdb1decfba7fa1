"""Moving by collective on a torch recording (``step --collective`` / ``back --collective``), and the
one-line refusal on a world that has none; ``export --perfetto`` of a torch run (a track per rank).

The recording is of tests/torch_scripts/reads_back_its_file.py: 2 ranks, 6 steps, each an all_reduce
then a barrier, so 12 collectives complete, in a known order (group 0, seq 1 .. 12).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_launch import TEST_SCRIPTS

from timetravel.explore import Session
from timetravel.explore.commands import CommandContext, CommandError, render_text, run_line
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "torch_scripts" / "reads_back_its_file.py"
STEPS = 6
COLLECTIVES = 2 * STEPS


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("torch_navigation") / "steps.ttr"
    launch = launch_naming([str(SCRIPT)])
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={SCRIPT}", "nproc=2", f"args={STEPS}", "rank_output=quiet"])
    report, _world = record_run(
        scenario, config, 5, path, snapshot_every_events=64, force=True, launch=launch
    )
    assert report["outcome"] == "pass", report["failure"]
    return path


def completing_events(session: Session) -> list[int]:
    """The recorded events at which c10d completed a collective (read off the recording: the call
    after which nodes/c10d/completed grew), found by seeking to each c10d call."""
    found, before = [], 0
    for number in range(1, session.end.events + 1):
        event = session.event(number)
        if event is not None and (event.node, event.kind) == ("c10d", "call"):
            session.goto_event(number)
            now = session.world.nodes["c10d"]["completed"]
            if now > before:
                found.append(number)
            before = now
    return found


def test_step_and_back_by_collective_stand_after_each_completing_event_in_turn(recording: Path) -> None:
    with Session.open(recording, launch=TEST_SCRIPTS) as session:
        expected = completing_events(session)
        assert len(expected) == COLLECTIVES
        session.goto("start")
        context = CommandContext(session=session)
        stops = []
        for _ in range(COLLECTIVES):
            moved = run_line("step --collective", context)
            assert moved.collective is not None and moved.note is None
            assert moved.collective["key"] == f"0#{len(stops) + 1}"  # group 0, seq 1, 2, ...
            assert moved.collective["completed"] == len(stops) + 1
            assert moved.collective["t_done_ns"] > moved.t_ns  # the result arrives a transfer later
            stops.append(moved.event)
        assert stops == expected
        at_end = run_line("step --collective", context)
        assert (
            at_end.event == expected[-1]
            and at_end.note == "no collective completes after the cursor: it stays"
        )
        backwards = [run_line("back --collective", context).event for _ in range(COLLECTIVES - 1)]
        assert backwards == expected[-2::-1]
        session.goto_event(expected[2] + 1)  # past the 3rd completion, before the 4th
        assert run_line("back --collective", context).event == expected[2]
        assert run_line("step --collective 4", context).event == expected[6]
        clamped = run_line("step --collective 100", context)
        assert (
            clamped.event == expected[-1]
            and clamped.note == f"only {COLLECTIVES - 7} collective(s) complete after the cursor"
        )
        text = "\n".join(render_text(run_line("back --collective 3", context), "ms"))
        assert (
            "completed barrier 0#" not in text
            and f"completed all_reduce 0#{COLLECTIVES - 3} (group 0" in text
        )
        assert run_line("back --collective 100", context).event == expected[0]


def test_step_by_collective_on_a_world_without_collectives_is_refused_in_one_line(tmp_path: Path) -> None:
    scenario = get_scenario("dp_training")
    path = tmp_path / "dp.ttr"
    record_run(scenario, scenario.resolve_config([]), 1, path, force=True)
    with Session.open(path) as session:
        context = CommandContext(session=session)
        with pytest.raises(CommandError) as refused:
            run_line("step --collective", context)
        assert str(refused.value) == (
            "step --collective: dp_training recordings have no collectives to step by (only torch runs "
            "have a c10d node): step by events, or use watch --next PATH"
        )
        assert session.position.events == 0
        with pytest.raises(CommandError, match=r"^back --collective: dp_training recordings"):
            run_line("back --collective", context)


DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"
DDP_STEPS = 3
DDP_RANKS = 3


def test_export_perfetto_of_a_torch_run_has_a_collectives_track_per_rank(tmp_path: Path) -> None:
    from timetravel.explore.perfetto import export_perfetto

    launch = launch_naming([str(DDP_MLP)])
    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        [f"script={DDP_MLP}", f"nproc={DDP_RANKS}", "rank_output=quiet", f"args=--steps {DDP_STEPS}"]
    )
    path = tmp_path / "ddp.ttr"
    report, world = record_run(scenario, config, 3, path, force=True, launch=launch)
    assert report["outcome"] == "pass", report["failure"]
    completed = world.nodes["c10d"]["completed"]
    with Session.open(path, launch=launch) as session:
        result = export_perfetto(session, tmp_path / "ddp.json")
    document = json.loads((tmp_path / "ddp.json").read_text())
    events = document["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    slices = [e for e in events if e.get("cat") == "collective"]
    steps = [e for e in events if e.get("cat") == "step"]
    assert result.collectives == len(slices) == DDP_RANKS * completed  # every rank is in every group
    assert result.optimizer_steps == len(steps) == DDP_RANKS * DDP_STEPS
    by_rank: dict[str, list[dict]] = {}
    for record in slices:
        assert threads[record["tid"]] == "collectives" and record["ph"] == "X"
        by_rank.setdefault(processes[record["pid"]], []).append(record)
        args = record["args"]
        assert (
            record["name"] == f"{args['op']} {args['group']}#{args['seq']}" == f"{args['op']} {args['key']}"
        )
        assert int(record["ts"] * 1000) == args["t_enter_ns"] < args["t_done_ns"]
        assert int(record["dur"] * 1000) == args["t_done_ns"] - args["t_enter_ns"]
        assert len(args["shapes"]) == len(args["dtypes"]) == args["tensors"]
        itemsize = {"float32": 4, "int64": 8, "float64": 8, "int32": 4, "uint8": 1}
        assert args["bytes"] == sum(
            itemsize[dtype] * _elements(shape)
            for shape, dtype in zip(args["shapes"], args["dtypes"], strict=True)
        )
    assert sorted(by_rank) == [f"r{rank}" for rank in range(DDP_RANKS)]
    for records in by_rank.values():  # one lane: this script's collectives are blocking, none overlaps
        ordered = sorted(records, key=lambda record: record["args"]["t_enter_ns"])
        assert [r["args"]["seq"] for r in ordered] == list(range(1, completed + 1))
        assert all(a["args"]["t_done_ns"] <= b["args"]["t_enter_ns"] for a, b in itertools.pairwise(ordered))
    done = {}
    for record in slices:  # a collective completes at one time for all its members
        done.setdefault(record["args"]["key"], set()).add(record["args"]["t_done_ns"])
    assert all(len(times) == 1 for times in done.values())
    gradients = [r for r in slices if r["args"]["op"] == "all_reduce" and r["args"]["bytes"] > 8]
    assert gradients and all(r["args"]["dtypes"][0] == "float32" for r in gradients)
    for record in steps:
        assert threads[record["tid"]] == "collectives" and record["ph"] == "i"
    assert sorted(r["args"]["step"] for r in steps) == sorted(list(range(1, DDP_STEPS + 1)) * DDP_RANKS)


def _elements(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count
