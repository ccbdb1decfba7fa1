"""``timetravel torchrun --against-real``: the script under real torchrun + gloo and under the simulator
(cuda=off), compared per rank; and the ``cuda`` setting it relies on.

Real torchrun runs here (torch 2.13.0 CPU, gloo works on this machine): these tests run in CI.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch  # the dev install has it: CI must fail, not skip, without it
from torch_launch import ROOT, TEST_SCRIPTS

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.torch.world import fidelity
from timetravel.torch.world.against_real import first_difference

SCRIPTS = ROOT / "tests" / "torch_scripts"
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"


def simulate(script: Path, *settings: str) -> dict:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", "nproc=2", "rank_output=quiet", *settings])
    return run_report(scenario, config, 0, launch=TEST_SCRIPTS)[0]


def against_real(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[int, dict, str]:
    """``timetravel torchrun --nproc-per-node 2 --against-real --json ARGS``: exit code, report, stderr."""
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "timetravel",
            "torchrun",
            "--nproc-per-node",
            "2",
            "--against-real",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    report = json.loads(completed.stdout) if completed.stdout.strip() else {}
    return completed.returncode, report, completed.stderr


# -- the cuda setting ------------------------------------------------------------------------------


def test_cuda_on_serves_a_device_per_local_rank_and_cuda_off_leaves_a_cpu_host() -> None:
    mapped = simulate(SCRIPTS / "cuda_seen.py", "args=on")
    unmapped = simulate(SCRIPTS / "cuda_seen.py", "args=off", "cuda=off")
    assert mapped["outcome"] == "pass", mapped["failure"]
    assert unmapped["outcome"] == "pass", unmapped["failure"]


def test_cuda_off_is_a_setting_the_scenario_lists() -> None:
    (param,) = [param for param in get_scenario("torch").params if param.name == "cuda"]
    assert param.default == "on"
    assert param.choices == ("on", "off")


# -- the comparison, on made-up captures -------------------------------------------------------------


def tensor(name: str, values: list[float], dtype: str = "float32") -> dict:
    import numpy as np
    import xxhash

    data = np.asarray(values, dtype=dtype).tobytes()
    return {
        "name": name,
        "dtype": dtype,
        "shape": [len(values)],
        "digest": xxhash.xxh3_64_hexdigest(data),
        "data": data,
    }


def step(number: int, loss: float, *tensors: dict) -> dict:
    return {"kind": "step", "step": number, "loss": loss, "tensors": list(tensors)}


def test_equal_bits_are_identical() -> None:
    records = [step(1, 0.5, tensor("w", [1.0, 2.0])), step(2, 0.25, tensor("w", [1.5, 2.5]))]
    result = fidelity.compare_rank(
        0, {"records": records, "lines": ["loss 0.5"]}, {"records": records, "lines": ["loss 0.5"]}
    )
    assert result["verdict"] == "identical"
    assert result["state"]["steps"] == {"real": 2, "simulator": 2}
    assert result["printed_losses"]["verdict"] == "identical"


def test_a_last_bit_apart_is_within_summation_order_and_names_the_largest_difference() -> None:
    real = [step(1, 0.5, tensor("w", [1.0, 2.0]))]
    nudged = [step(1, 0.5, tensor("w", [1.0, float(torch.nextafter(torch.tensor(2.0), torch.tensor(3.0)))]))]
    result = fidelity.compare_rank(0, {"records": real, "lines": []}, {"records": nudged, "lines": []})
    assert result["state"]["verdict"] == "summation_order"
    assert result["verdict"] == "summation_order"
    assert 0 < result["state"]["max_rel_diff"] < 1.2e-7  # one float32 ulp at 2.0, over max|w| = 2.0


def test_a_real_difference_names_the_first_step_and_tensor() -> None:
    real = [
        step(1, 0.5, tensor("a", [1.0]), tensor("b", [1.0])),
        step(2, 0.4, tensor("a", [1.0]), tensor("b", [3.0])),
    ]
    simulated = [
        step(1, 0.5, tensor("a", [1.0]), tensor("b", [1.0])),
        step(2, 0.4, tensor("a", [1.0]), tensor("b", [2.0])),
    ]
    result = fidelity.compare_rank(1, {"records": real, "lines": []}, {"records": simulated, "lines": []})
    assert result["verdict"] == "differs"
    assert result["state"]["first_difference"]["at"] == "step 2"
    assert result["state"]["first_difference"]["tensor"] == "b"
    assert result["losses"]["verdict"] == "identical"
    same = fidelity.compare_rank(0, {"records": real, "lines": []}, {"records": real, "lines": []})
    assert first_difference([same, result]) == {"rank": 1, "part": "state", "at": "step 2", "tensor": "b"}
    assert first_difference([same]) is None


def test_another_shape_or_a_missing_step_differs() -> None:
    real = [step(1, 0.5, tensor("w", [1.0, 2.0])), step(2, 0.5, tensor("w", [1.0, 2.0]))]
    simulated = [step(1, 0.5, tensor("w", [1.0]))]
    result = fidelity.compare_states(real, simulated)
    assert result["verdict"] == "differs"
    assert "float32[2]" in result["first_difference"]["why"]
    assert fidelity.compare_values([0.5, 0.4], [0.5], label="step")["first_difference"] == {
        "step": 2,
        "missing": True,
    }


def test_printed_losses_are_read_in_the_spellings_scripts_use() -> None:
    lines = [
        "step 0 loss 0.746462",
        "iter 3: loss 4.2543, time 12ms",
        "{'loss': 0.5, 'lr': 0.1}",
        "train_loss=1e-3",
        "lossy 7",
        "no number",
    ]
    assert fidelity.printed_losses(lines) == ["0.746462", "4.2543", "0.5", "1e-3"]
    assert fidelity.relative_difference(1.0, 1.0) == 0.0
    assert math.isinf(fidelity.relative_difference(1.0, math.nan))


# -- against real torchrun -----------------------------------------------------------------------------


def test_ddp_mlp_gives_real_torchruns_losses_and_digests_bit_for_bit() -> None:
    code, report, stderr = against_real(str(DDP_MLP), "--steps", "4")
    assert code == 0, stderr
    assert report["verdict"] == "identical"
    assert report["simulator"]["cuda"] == "off" and "--set cuda=off" in report["simulator"]["command"]
    # real torchrun exits 0, or 1 when gloo's teardown aborted a rank after every script returned
    # (seen under load): the report tells that apart from a failure of the script
    real = report["real"]
    assert real["returncode"] == 0 or "after every rank's script returned" in str(real["teardown"]), real
    for rank in report["ranks"]:
        assert rank["losses"] == {
            "count": {"real": 4, "simulator": 4},
            "verdict": "identical",
            "max_rel_diff": 0.0,
            "first_difference": None,
        }
        assert rank["state"]["verdict"] == "identical"
        assert rank["state"]["steps"] == {"real": 4, "simulator": 4}
        assert rank["state"]["tensors"] == 4  # two Linear layers' weight and bias
    assert "against-real: real torchrun" in stderr  # progress, on stderr


@pytest.mark.slow
def test_unseeded_randomness_names_the_first_step_that_differs() -> None:
    code, report, stderr = against_real(str(SCRIPTS / "unseeded.py"))
    assert code == 1, stderr
    assert report["verdict"] == "differs"
    assert report["first_difference"] == {"rank": 0, "part": "state", "at": "step 1", "tensor": "weight"}
    for rank in report["ranks"]:
        assert rank["losses"]["first_difference"]["step"] == 1
        assert rank["state"]["first_difference"]["at"] == "step 1"


@pytest.mark.slow
def test_a_script_real_torch_cannot_run_here_is_refused_in_one_line(tmp_path: Path) -> None:
    script = tmp_path / "nccl_only.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group(backend='nccl')\n")
    code, report, stderr = against_real(str(script))
    assert code == 2
    assert report == {}
    (line,) = [line for line in stderr.splitlines() if line.startswith("timetravel: error:")]
    assert "real torchrun cannot run this script on this machine" in line
    assert "NCCL" in line


def processes_naming(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in command:
                found.append(f"{entry.name}: {command}")
    return found


def test_ctrl_c_during_the_real_run_leaves_no_process(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "timetravel", "torchrun", "--nproc-per-node", "2", "--against-real"]
    cli = subprocess.Popen(
        [*command, str(SCRIPTS / "sleeps_after_init.py"), "600"],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("timetravel-against-real-*/real/rank*.capture"))) < 2:
            assert time.monotonic() < deadline, "the real ranks never started"
            assert cli.poll() is None, cli.communicate()
            time.sleep(0.2)
        assert processes_naming(str(tmp_path))  # torchrun and its two ranks, in sessions of their own
        cli.send_signal(signal.SIGINT)
        _, stderr = cli.communicate(timeout=60)
    finally:
        cli.kill()
    assert cli.returncode == 130, stderr
    assert "interrupted" in stderr
    assert processes_naming(str(tmp_path)) == []


@pytest.mark.slow
def test_a_real_run_over_its_time_is_ended_and_refused(tmp_path: Path) -> None:
    code, _, stderr = against_real(
        "--real-timeout", "15", str(SCRIPTS / "sleeps_after_init.py"), "600", env={"TMPDIR": str(tmp_path)}
    )
    assert code == 2
    assert "did not finish in time" in stderr.splitlines()[-1]
    assert processes_naming(str(tmp_path)) == []


def test_options_it_cannot_honour_are_refused_before_anything_runs() -> None:
    for option in (["--record", "x.ttr"], ["--set", "cuda=on"], ["--max-restarts", "1"], ["--nnodes", "2"]):
        code, _, stderr = against_real(*option, str(DDP_MLP), timeout=60)
        assert code == 2, option
        assert stderr.count("\n") == 1 and stderr.startswith("timetravel: error: "), stderr


def test_the_real_runs_seconds_are_a_progress_line_of_text_alone() -> None:
    import io

    from timetravel.cli.progress import ProgressLine

    stream = io.StringIO()
    ProgressLine(stream, enabled=True).update(-1, None, "real torchrun: 12 s")
    assert stream.getvalue() == "\rreal torchrun: 12 s"


def test_real_torchrun_crashing_after_every_script_returned_is_not_the_scripts_failure() -> None:
    from timetravel.torch.world.against_real import real_error
    from timetravel.torch.world.real_torchrun import RealRun

    # gloo's teardown at exit aborts a rank now and then ("terminate called without an active
    # exception"): torchrun exits 1 though every script returned
    crashed = RealRun(returncode=1, wall_s=1.0, stderr={0: ["terminate called without an active exception"]})
    returned = {rank: [{"kind": "end", "ended": "returned", "tensors": []}] for rank in (0, 1)}
    assert real_error(crashed, returned) is None
    raised = {0: returned[0], 1: [{"kind": "end", "ended": "raised ValueError", "tensors": []}]}
    crashed.stderr[1] = ["Traceback (most recent call last):", "ValueError: bad batch"]
    assert real_error(crashed, raised) == "r1: ValueError: bad batch"


def test_nccl_is_refused_as_this_hosts_torch_refuses_it_when_cuda_is_off() -> None:
    for backend in ("nccl", "cpu:gloo,cuda:nccl"):
        served = simulate(SCRIPTS / "nccl_backend.py", f"args={backend}")
        assert served["outcome"] == "pass", served["failure"]
        unserved = simulate(SCRIPTS / "nccl_backend.py", f"args={backend}", "cuda=off")
        assert unserved["failure"]["kind"] == "exception", unserved["failure"]
        assert (
            "RuntimeError: Distributed package doesn't have NCCL built in" in unserved["failure"]["message"]
        )
        assert unserved["failure"]["node"] == "r0"
