"""The rank processes belong to whoever owns the run: no module globals, no process left behind.

A plain run's Simulation owns its RankHost (torch/world/host.py) and ends its ranks when the run can
go no further, or when it is dropped; a torch Session's world source owns the host its re-executions
use. What a run may execute travels with it (sim/launch.py), never in a global: two runs in one
process do not see each other's opt-ins or processes.
"""

from __future__ import annotations

import gc
import os
import subprocess
import time
from pathlib import Path

import pytest
from torch_recordings import DDP_MLP, ROOT, TIMETRAVEL, record_torchrun

from timetravel.explore import Session
from timetravel.explore.verify_replay import replay_session
from timetravel.scenarios import get_scenario
from timetravel.sim.kernel import Simulation
from timetravel.sim.launch import NO_LAUNCH
from timetravel.sim.runner import build_world, run_report
from timetravel.sim.scenario import NotAuthorizedError
from timetravel.torch.world.host import RankHost
from timetravel.torch.world.recorded_script import ScriptChangedError, name_script
from timetravel.torch.world.specs import launch_naming

STEPS_ARGUMENT = "args=--steps 2"


def ddp_config(*settings: str) -> dict:
    return get_scenario("torch").resolve_config(
        [f"script={DDP_MLP}", "nproc=2", "rank_output=quiet", STEPS_ARGUMENT, *settings]
    )


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split()[2] not in ("Z", "X")
    except OSError:
        return False


DEATH_WAIT_S = 10.0
"""A SIGKILLed rank is gone once the kernel has delivered the signal and its parent reaped it."""


def all_ended(pids: list[int]) -> bool:
    deadline = time.monotonic() + DEATH_WAIT_S
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_run_s_simulation_owns_its_host_and_ends_its_ranks_with_the_run() -> None:
    scenario = get_scenario("torch")
    launch = launch_naming([str(DDP_MLP)])
    world = build_world(scenario, ddp_config(), 0, launch)
    simulation = Simulation(scenario, world, launch=launch)
    host = simulation.processes
    assert isinstance(host, RankHost) and simulation.ctx.processes is host and host.launch is launch
    simulation.run(max_events=6)  # the ranks are up and mid-run
    pids = [pid for live in host.drivers for pid in live.pids.values()]
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    assert simulation.run().outcome == "pass"
    assert host.closed and host.drivers == []
    assert all_ended(pids)


def test_a_simulation_dropped_mid_run_ends_its_ranks() -> None:
    scenario = get_scenario("torch")
    launch = launch_naming([str(DDP_MLP)])
    simulation = Simulation(scenario, build_world(scenario, ddp_config(), 0, launch), launch=launch)
    simulation.run(max_events=6)
    pids = [pid for live in simulation.processes.drivers for pid in live.pids.values()]
    assert pids and all(alive(pid) for pid in pids)
    del simulation
    gc.collect()
    assert all_ended(pids)


def test_what_one_run_may_execute_is_not_what_another_may() -> None:
    scenario = get_scenario("torch")
    report, _world = run_report(scenario, ddp_config(), 0, launch=launch_naming([str(DDP_MLP)]))
    assert report["outcome"] == "pass"
    # the same script, the same process, a run that named nothing: refused, whatever ran before
    with pytest.raises(NotAuthorizedError, match="was not named on the command line"):
        run_report(scenario, ddp_config(), 0, launch=NO_LAUNCH)


def test_a_plain_run_inside_a_session_leaves_the_session_s_ranks_alone(tmp_path: Path) -> None:
    recording = tmp_path / "ddp.ttr"
    done = record_torchrun(recording, DDP_MLP, ("--steps", "3"))
    assert done.returncode == 0, done.stderr
    with Session.open(recording, launch=launch_naming([str(DDP_MLP)])) as session, session.with_values():
        session.goto_event(40)  # with values wanted, a seek runs the ranks (else the journal: no process)
        host = session.source.host
        live = host.driver_for(session.world)
        assert live is not None
        pids = list(live.pids.values())
        report, _world = run_report(
            get_scenario("torch"), ddp_config(), 1, launch=launch_naming([str(DDP_MLP)])
        )
        assert report["outcome"] == "pass"
        assert host.driver_for(session.world) is live and all(alive(pid) for pid in pids)
        session.goto("end")
    assert host.closed and all_ended(pids)


def test_naming_the_script_in_python_lets_one_session_re_execute_it(tmp_path: Path) -> None:
    recording = tmp_path / "ddp.ttr"
    done = record_torchrun(recording, DDP_MLP, ("--steps", "2"))
    assert done.returncode == 0, done.stderr
    with Session.open(recording) as session, pytest.raises(NotAuthorizedError):
        replay_session(session)
    changed = tmp_path / "ddp_mlp.py"
    changed.write_text(DDP_MLP.read_text() + "\n# changed\n")
    with Session.open(recording) as session:
        with pytest.raises(ScriptChangedError, match="the script changed since the recording"):
            name_script(session, str(changed))
        named = name_script(session, str(DDP_MLP))
        assert not named.changed
        assert replay_session(session).verified
    # the permission was that session's, not the process's
    with Session.open(recording) as other, pytest.raises(NotAuthorizedError):
        replay_session(other)


def test_the_zygote_ignores_a_working_directory_that_shadows_torch(tmp_path: Path) -> None:
    """``python -m`` puts the working directory first on sys.path; a folder holding a ``torch``
    package (or another timetravel checkout) made the zygote import it and fail to start."""
    shadow = tmp_path / "torch"
    shadow.mkdir()
    (shadow / "__init__.py").write_text('raise SystemExit("the shadowing torch was imported")\n')
    done = subprocess.run(
        [*TIMETRAVEL, "torchrun", "--nproc-per-node", "2", str(DDP_MLP), "--steps", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "outcome: pass" in done.stdout
