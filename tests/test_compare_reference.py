"""``compare --reference FILE``: a real run's logged losses laid over every branch.

The loader reads untrusted files, so each malformed case must give a one-line error naming the file
and line (exit code 2 on the CLI), and the size limit must be checked before anything is read. The
overlay matches the k-th logged value to the k-th reference step and names the first step outside
rtol. The CLI test runs on a real dp_training recording, with references written from the
recording's own loss series.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from timetravel.cli import main as cli_main
from timetravel.explore import Session
from timetravel.explore import reference as reference_module
from timetravel.explore.reference import load_reference, node_values, overlay
from timetravel.explore.work import ExploreError
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario

DP_SETTINGS = {"ranks": 4, "steps": 20}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the loader ---------------------------------------------------------------------------------------


def test_csv_with_a_header_in_any_column_order(tmp_path: Path) -> None:
    path = write(tmp_path, "ref.csv", "wall_time,loss,step\n1.5,2.25,0\n1.6,2.0,1\n\n1.7,1.5e-1,5\n")
    assert load_reference(path) == [(0, 2.25), (1, 2.0), (5, 0.15)]


def test_csv_without_a_header_is_step_then_loss(tmp_path: Path) -> None:
    path = write(tmp_path, "ref.csv", "1, 0.5\n2, 0.25\n")
    assert load_reference(path) == [(1, 0.5), (2, 0.25)]


def test_json_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "ref.jsonl", '{"step": 10, "loss": 3}\n\n{"step": 20, "loss": 2.5, "lr": 0.1}\n')
    assert load_reference(path) == [(10, 3.0), (20, 2.5)]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("nan.csv", "step,loss\n1,0.5\n2,nan\n", "nan.csv:3: loss nan is not finite"),
        ("inf.csv", "1,inf\n", "inf.csv:1: loss inf is not finite"),
        ("word.csv", "step,loss\n1,abc\n", "word.csv:2: loss 'abc' is not a number"),
        ("fraction.csv", "1.5,0.5\n", "fraction.csv:1: step 1.5 is not an integer"),
        ("negative.csv", "-1,0.5\n", "negative.csv:1: step -1 is not an integer"),
        ("repeat.csv", "step,loss\n1,0.5\n1,0.4\n", "repeat.csv:3: step 1 repeats step 1"),
        ("back.csv", "step,loss\n2,0.5\n1,0.4\n", "back.csv:3: step 1 goes back from step 2"),
        ("header.csv", "step,value\n1,0.5\n", "header.csv:1: a header needs both a 'step' and a 'loss'"),
        ("three.csv", "1,0.5,7\n", "three.csv:1: without a header a reference has two columns"),
        ("short.csv", "step,loss\n1\n", "short.csv:2: 1 columns, expected a step and a loss"),
        ("empty.csv", "\n\n", "empty.csv: no steps (an empty file)"),
        ("only.csv", "step,loss\n", "only.csv: no steps (only a header)"),
        ("bad.jsonl", '{"step": 1, "loss": 0.5}\n{"step": 2,\n', "bad.jsonl:2: not a JSON object"),
        ("nan.jsonl", '{"step": 1, "loss": NaN}\n', "nan.jsonl:1: not a JSON object (NaN is not a number"),
        ("key.jsonl", '{"step": 1, "value": 0.5}\n', 'key.jsonl:1: expected {"step": N, "loss": X}'),
        ("text.jsonl", '{"step": 1, "loss": "0.5"}\n', "text.jsonl:1: loss '0.5' is not a number"),
        ("bool.jsonl", '{"step": true, "loss": 0.5}\n', "bool.jsonl:1: step True is not an integer"),
        ("list.jsonl", '{"step": 1, "loss": 0.5}\n[1, 2]\n', 'list.jsonl:2: expected {"step": N, "loss": X}'),
    ],
)
def test_a_malformed_reference_is_one_line_naming_file_and_line(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(ExploreError) as raised:
        load_reference(path)
    assert str(raised.value).startswith(f"{path}{message.removeprefix(name)}")
    assert "\n" not in str(raised.value)


def test_the_size_limit_is_checked_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "big.csv", "step,loss\n" + "".join(f"{k},1.0\n" for k in range(100)))
    monkeypatch.setattr(reference_module, "REFERENCE_BYTES_MAX", 64)
    reads: list[int] = []

    class Refusing:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> Refusing:
            return self

        def __exit__(self, *args: object) -> None:
            self.handle.close()

        def fileno(self) -> int:
            return int(self.handle.fileno())

        def read(self, size: int = -1) -> bytes:
            reads.append(size)
            return bytes(self.handle.read(size))

    real_open = reference_module.open_regular
    monkeypatch.setattr(reference_module, "open_regular", lambda name: Refusing(real_open(name)))
    with pytest.raises(ExploreError, match=r"big\.csv: \d+ bytes, more than the 64 a reference may have"):
        load_reference(path)
    assert reads == []


def test_the_row_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference_module, "REFERENCE_ROWS_MAX", 3)
    path = write(tmp_path, "rows.csv", "1,1\n2,1\n3,1\n4,1\n")
    with pytest.raises(ExploreError, match=r"rows\.csv:4: more than 3 steps"):
        load_reference(path)


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    import os

    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO, not a regular file"):
        load_reference(fifo)


# -- the overlay -----------------------------------------------------------------------------------


def test_the_first_step_outside_rtol_and_the_compared_length() -> None:
    reference = [(10, 1.0), (20, 0.5), (30, 0.25), (40, 0.125)]
    result = overlay("b1", [1.0, 0.5004, 0.2506], reference, rtol=1e-3)
    assert (result.compared, result.reference_steps, result.simulated_steps) == (3, 4, 3)
    assert [row.step for row in result.rows] == [10, 20, 30]
    assert result.first_outside == 2
    row = result.first_outside_row
    assert row is not None and (row.step, row.reference, row.simulated) == (30, 0.25, 0.2506)
    assert math.isclose(row.relative_difference, 0.0024)
    # 0.5004 is 8e-4 relative: inside 1e-3, outside 5e-4.
    assert overlay("b1", [1.0, 0.5004], reference, rtol=5e-4).first_outside == 1
    assert overlay("b1", [1.0, 0.5004, 0.2506], reference, rtol=1e-2).first_outside is None


def test_a_zero_reference_and_a_nan_loss() -> None:
    zero = overlay("a", [0.0, 1e-12], [(0, 0.0), (1, 0.0)], rtol=0.5)
    assert zero.first_outside == 1 and zero.rows[1].relative_difference == math.inf
    assert zero.rows[1].to_data()["relative_difference"] == "inf"
    nan = overlay("a", [1.0, math.nan], [(0, 1.0), (1, 1.0)], rtol=1e9)
    assert nan.first_outside == 1


def test_node_values_keep_one_node_in_logged_order() -> None:
    series = [[5, "r1", 9.0], [5, "r0", 2.0], [9, "r0", 1.0], [9, "r0", True], [12, "r0", "x"]]
    assert node_values(series, "r0") == [2.0, 1.0]


# -- the CLI on a real recording -------------------------------------------------------------------


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[float]]:
    scenario = get_scenario("dp_training")
    path = tmp_path_factory.mktemp("dp") / "dp.ttr"
    record_run(scenario, scenario.resolve_config(DP_SETTINGS), 0, path)
    assert (
        cli_main(["branch", str(path), "--at", "50ms", "--set", "reduce_order=arrival", "--name", "arr"]) == 0
    )
    with Session.open(path) as session:
        losses = node_values(session.metric_series("loss"), "r0")
    assert len(losses) == DP_SETTINGS["steps"]
    return path, losses


@pytest.fixture
def path(recording: Any, capsys: pytest.CaptureFixture[str]) -> Path:
    """The recording's path, with what was printed before the test read away."""
    capsys.readouterr()
    return recording[0]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_reference_from_the_recording_itself_is_within_rtol(
    recording: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, losses = recording
    capsys.readouterr()
    reference = write(
        tmp_path,
        "ref.jsonl",
        "".join(json.dumps({"step": k + 1, "loss": v}) + "\n" for k, v in enumerate(losses)),
    )
    code, out, err = cli(capsys, "compare", str(path), "main", "arr", "--reference", str(reference))
    assert (code, err) == (0, "")
    assert out.count("every compared step within rtol") == 2
    assert f"reference vs main (loss on r0, rtol 0.001): {len(losses)} steps compared" in out
    assert "reference vs arr (loss on r0, rtol 0.001)" in out


def perturbed_reference(tmp_path: Path, losses: list[float]) -> Path:
    """A reference CSV of the first 15 steps with step 7's loss 1% off: the step a compare must name."""
    lines = ["step,loss"] + [f"{k + 1},{v * 1.01 if k + 1 == 7 else v!r}" for k, v in enumerate(losses)]
    return write(tmp_path, "ref.csv", "\n".join(lines[:16]) + "\n")


@pytest.fixture
def perturbed(
    recording: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, list[float], str]:
    """The perturbed reference, the recorded losses, and what the CLI prints comparing main and arr to it."""
    path, losses = recording
    capsys.readouterr()
    reference = perturbed_reference(tmp_path, losses)
    code, out, _err = cli(capsys, "compare", str(path), "main", "arr", "--reference", str(reference))
    assert code == 0
    return reference, losses, out


def test_cli_names_the_perturbed_step(
    recording: Any, perturbed: tuple[Path, list[float], str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = recording
    reference, losses, out = perturbed
    assert out.count(f"first step outside rtol: 7 (ref {losses[6] * 1.01:.8g}, sim {losses[6]:.8g})") == 2
    assert "15 steps compared (reference 15, simulated 20)" in out
    assert out.count("<- first outside") == 2
    code, out, _err = cli(
        capsys, "compare", str(path), "main", "arr", "--reference", str(reference), "--rtol", "0.02"
    )
    assert code == 0 and out.count("every compared step within rtol") == 2
    code, out, _err = cli(
        capsys, "compare", str(path), "main", "arr", "--reference", str(reference), "--json"
    )
    data = json.loads(out)
    assert code == 0 and [entry["branch"] for entry in data["reference"]] == ["main", "arr"]
    first = data["reference"][0]
    assert (first["compared"], first["first_outside"]["step"], first["missing"]) == (15, 7, None)
    assert first["first_outside"]["simulated"] == losses[6]


def test_cli_a_metric_or_node_the_branch_lacks_is_said(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = write(tmp_path, "ref.csv", "1,0.5\n")
    code, out, _err = cli(
        capsys,
        "compare",
        str(path),
        "main",
        "arr",
        "--reference",
        str(reference),
        "--reference-metric",
        "acc",
    )
    assert code == 0 and "reference vs main (acc on r0, rtol 0.001): no metric 'acc' on main" in out
    code, out, _err = cli(
        capsys, "compare", str(path), "main", "arr", "--reference", str(reference), "--reference-node", "r3"
    )
    assert code == 0 and "metric 'loss' has no values on node 'r3' in arr" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rtol", "-1"], "argument --rtol: must be a finite number >= 0, got '-1'"),
        (["--rtol", "abc"], "argument --rtol: takes a number, got 'abc'"),
        (["--rtol", "nan"], "argument --rtol: must be a finite number >= 0, got 'nan'"),
    ],
)
def test_cli_bad_rtol_is_exit_2(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    reference = write(tmp_path, "ref.csv", "1,0.5\n")
    with pytest.raises(SystemExit) as raised:
        cli_main(["compare", str(path), "main", "arr", "--reference", str(reference), *extra])
    err = capsys.readouterr().err
    assert raised.value.code == 2 and message in err and err.count("\n") == 1


def test_cli_bad_reference_file_is_exit_2_one_line(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = write(tmp_path, "ref.csv", "step,loss\n1,0.5\n1,0.4\n")
    code, out, err = cli(capsys, "compare", str(path), "main", "arr", "--reference", str(reference))
    assert (code, out) == (2, "")
    assert err == f"timetravel: error: {reference}:3: step 1 repeats step 1 (steps must increase)\n"
    code, out, err = cli(
        capsys, "compare", str(path), "main", "arr", "--reference", str(tmp_path / "none.csv")
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and "none.csv" in err


def test_cli_reference_options_without_a_reference_are_exit_2(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(
        capsys, "compare", str(path), "main", "arr", "--rtol", "0.1", "--reference-node", "r1"
    )
    assert (code, out) == (2, "")
    assert err == "timetravel: error: compare: --reference-node, --rtol need --reference FILE\n"


# -- the command language: the shell (and the TUI, which runs the same lines) ----------------------


def test_shell_compare_reference_prints_the_cli_s_lines(
    recording: Any, perturbed: tuple[Path, list[float], str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = recording
    reference, losses, cli_out = perturbed
    code, out, err = cli(
        capsys,
        "shell",
        str(path),
        "-c",
        f"compare main arr --reference {reference}; compare main arr "
        f"--reference {reference} --rtol 0.02 --reference-node r1",
    )
    assert (code, err) == (0, "")
    wanted = f"first step outside rtol: 7 (ref {losses[6] * 1.01:.8g}, sim {losses[6]:.8g})"
    words = " ".join(out.split())  # the shell folds long lines at the terminal's width
    assert words.count(wanted) == 2  # the first command, on both branches
    for line in cli_out.splitlines():
        if line.startswith(("reference vs", "  first step", "        step")):
            assert " ".join(line.split()) in words  # the same lines as the CLI
    assert "reference vs main (loss on r1, rtol 0.02): metric 'loss' has no values on node 'r1'" in words


def test_shell_compare_reference_as_json_and_the_tui_s_text(
    recording: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from timetravel.explore.commands import CommandContext, render_text, run_line

    path, losses = recording
    reference = write(
        tmp_path, "ref.jsonl", "".join(f'{{"step": {k}, "loss": {v!r}}}\n' for k, v in enumerate(losses))
    )
    capsys.readouterr()
    code, out, _err = cli(
        capsys, "shell", str(path), "--json", "-c", f"compare main arr --reference {reference}"
    )
    assert code == 0
    data = json.loads(out.splitlines()[-1])
    result = data.get("result", data)
    assert [entry["branch"] for entry in result["reference"]] == ["main", "arr"]
    assert result["reference"][0]["first_outside"] is None
    with Session.open(path) as session:
        context = CommandContext(session)
        answer = run_line(f"compare main arr --reference {reference}", context)
        text = render_text(answer, session.display_unit)  # what the TUI's output pane prints
    assert sum("every compared step within rtol" in line for line in text) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("compare main arr --rtol 0.1", "compare: --rtol need --reference FILE"),
        ("compare main arr --reference {ref} --rtol x", "compare: --rtol takes a number, got 'x'"),
        ("compare main arr --reference {ref} --rtol -1", "compare: --rtol must be a finite number >= 0"),
        ("compare main arr --reference {missing}", "missing.csv"),
        ("compare main arr --reference {bad}", "bad.csv:2: loss 'abc' is not a number"),
    ],
)
def test_shell_compare_reference_bad_input_is_one_line_and_exit_2(
    recording: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    path, _losses = recording
    names = {
        "ref": write(tmp_path, "ref.csv", "1,0.5\n"),
        "missing": tmp_path / "missing.csv",
        "bad": write(tmp_path, "bad.csv", "step,loss\n1,abc\n"),
    }
    capsys.readouterr()
    code, out, err = cli(capsys, "shell", str(path), "-c", line.format(**names))
    assert code == 2
    assert message in err and "Traceback" not in err + out
    assert len(err.strip().splitlines()) == 1
