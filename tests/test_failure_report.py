"""What a failure report shows (issue 31, part 7): every field a detector recorded in ``--json``, a hang's
flight recorder as a table in the text, and compare's metric names whole, ``loss`` first."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)

from timetravel.cli import main as cli_main
from timetravel.cli.compare_command import METRIC_NAME_WIDTH, _metric_lines, wrap_name
from timetravel.cli.run_command import flight_recorder_lines
from timetravel.explore.compare_results import CompareResult, MetricRow, RunSide
from timetravel.explore.results import public_failure
from timetravel.sim.failure import failure_fields, make_failure

ROOT = Path(__file__).resolve().parent.parent
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"
DROP = json.dumps([{"kind": "drop", "target": "r2", "t_start": 1_000_000}])
"""r2's contribution to its first collective after 1 ms never arrives: the others wait for it."""


def test_failure_fields_keep_every_detector_field_the_common_ones_first() -> None:
    failure = make_failure("divergence", "r3", 5, "replicas differ", "torch.collective.divergence")
    failure.update(minority=["r3"], split=[["r0", "r1", "r2"], ["r3"]], element=np.int64(7), raw=b"\x01\xff")
    fields = failure_fields(failure)
    assert fields is not None
    assert list(fields)[:5] == ["kind", "node", "t_ns", "message", "signature"]
    assert fields["minority"] == ["r3"] and fields["split"] == [["r0", "r1", "r2"], ["r3"]]
    assert fields["element"] == 7 and type(fields["element"]) is int and fields["raw"] == "01ff"
    json.dumps(fields)  # plain JSON
    assert public_failure(failure) == fields  # what every explore result's --json shows
    # a recording's END frame keeps only the common five: a result shows those, with None for none
    assert public_failure({"kind": "hang", "node": "r1", "t_ns": 1, "message": "m", "signature": "s"}) == {
        "kind": "hang",
        "node": "r1",
        "t_ns": 1,
        "message": "m",
        "signature": "s",
    }


def test_a_hang_prints_its_flight_recorder_as_a_table_and_json_carries_every_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    arguments = [
        "torchrun",
        "--nproc-per-node",
        "3",
        "--set",
        "rank_output=quiet",
        "--set",
        "hang_timeout=1ms",
    ]
    arguments += ["--set", f"faults={DROP}", str(DDP_MLP), "--steps", "4"]
    assert cli_main(arguments) == 1
    text = capsys.readouterr().out.splitlines()
    start = text.index("  flight recorder (per rank: its last collectives, as NCCL's recorder keeps them):")
    assert text[start + 1].split() == [
        "rank",
        "last",
        "entered",
        "last",
        "completed",
        "status",
        "waits",
        "on",
    ]
    rows = [line.split() for line in text[start + 2 : start + 5]]
    assert [row[0] for row in rows] == ["r0", "r1", "r2"]
    assert rows[0][3:] == ["waiting", "r2"] and rows[2][3:] == ["waiting", "-"]  # r2's own is the dropped one
    assert cli_main([*arguments[:1], "--json", *arguments[1:]]) == 1
    failure = json.loads(capsys.readouterr().out)["failure"]
    assert (failure["kind"], failure["node"], failure["waiting_for"]) == ("hang", "r2", ["r2"])
    assert [row["rank"] for row in failure["flight_recorder"]] == ["r0", "r1", "r2"]
    assert failure["flight_recorder"][0]["last_entered"] == rows[0][1]
    assert failure["site"] == "torch.collective.hang"


def test_flight_recorder_lines_align_their_columns_and_say_dash_for_nothing() -> None:
    rows = [
        {
            "rank": "r0",
            "last_entered": "0#12",
            "last_completed": "0#11",
            "status": "waiting",
            "waits_on": ["r1"],
        },
        {"rank": "r1", "last_entered": None, "last_completed": None, "status": "exited", "waits_on": []},
    ]
    assert flight_recorder_lines(rows)[1:] == [
        "  rank  last entered  last completed  status   waits on",
        "  r0    0#12          0#11            waiting  r1",
        "  r1    -             -               exited   -",
    ]
    assert flight_recorder_lines(None) == [] and flight_recorder_lines([]) == []


def test_metric_names_wrap_whole_never_cut() -> None:
    """Cut at 30 characters, these two tensors' names read alike (issue 31)."""
    first, second = (
        "grad_norm/transformer.h.0.attn.c_attn.weight",
        "grad_norm/transformer.h.0.attn.c_proj.weight",
    )
    assert "".join(wrap_name(first, METRIC_NAME_WIDTH)) == first
    assert wrap_name(first, METRIC_NAME_WIDTH) != wrap_name(second, METRIC_NAME_WIDTH)
    assert all(len(piece) <= METRIC_NAME_WIDTH for piece in wrap_name("x" * 100, METRIC_NAME_WIDTH))
    assert "".join(wrap_name("x" * 100, METRIC_NAME_WIDTH)) == "x" * 100
    side = RunSide("main", "pass", None, 0)
    rows = tuple(MetricRow(name, 3, 3, 1.0, 2.0, 10) for name in ("loss", first, second))
    result = CompareResult(side, side, None, {}, None, rows)
    lines = _metric_lines(SimpleNamespace(display_unit="ms"), result)  # type: ignore[arg-type]
    assert lines[1].split()[0] == "loss"
    assert lines[2].split()[0] + lines[3].strip() == first
    assert lines[4].split()[0] + lines[5].strip() == second


def test_a_recorded_failure_in_explain_and_compare_json_carries_every_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recording's END frame keeps the five common fields; the rest (a hang's ``waiting_for`` and
    flight recorder) come from the world the branch ended in (explore/recorded_failure.py)."""
    recording = tmp_path / "hang.ttr"
    arguments = ["torchrun", "--nproc-per-node", "3", "--record", str(recording)]
    arguments += ["--set", "rank_output=quiet", "--set", "hang_timeout=1ms", "--set", f"faults={DROP}"]
    assert cli_main([*arguments, str(DDP_MLP), "--steps", "4"]) == 1
    capsys.readouterr()
    assert cli_main(["compare", str(recording), "main", "main", "--json"]) in (0, 1)
    compared = json.loads(capsys.readouterr().out)
    failure = compared["a"]["failure"]
    assert (failure["kind"], failure["waiting_for"]) == ("hang", ["r2"])
    assert [row["rank"] for row in failure["flight_recorder"]] == ["r0", "r1", "r2"]
    assert cli_main(["explain", str(recording), "--json"]) in (0, 1, 2)
    explained = json.loads(capsys.readouterr().out)
    assert explained["failure"]["waiting_for"] == ["r2"]
