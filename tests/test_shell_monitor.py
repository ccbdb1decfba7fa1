"""Progress and stop: the context's hooks, a progress line on the terminal, Ctrl-C stops the command.

The fake engine's ``slow N K`` stands for a long-running command (branch, fanout, ...): N units of
work, a progress report and a stop check per unit, and after K units the process sends itself a
real SIGINT — what Ctrl-C on a terminal does. ``giveup N K`` is long-running work that has no
result when stopped early (it raises). ``seek N K`` is the same work in a command that is not
long-running (a seek), which Ctrl-C interrupts at once.
"""

from __future__ import annotations

import io
import signal
from itertools import count

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console
from shell_fakes import FakeEngine

from timetravel.explore.minimize_trials import Progress as MinimizeProgress
from timetravel.explore.work import WorkProgress
from timetravel.shell import CommandRunner, Repl, Status
from timetravel.shell.monitor import STOP_NOTICE, CommandMonitor, ProgressLine, progress_text
from timetravel.shell.runner import EXIT_INTERRUPTED, STOPPED_NOTE

ENTER = "\r"
CTRL_D = "\x04"


def test_progress_text_reads_work_and_minimizer_reports() -> None:
    assert progress_text(WorkProgress("branch b1", 8_192, 20_480)) == "branch b1: 40% (8,192/20,480)"
    assert progress_text(WorkProgress("fanout", 3, 20, "2 failing")) == "fanout: 15% (3/20), 2 failing"
    assert progress_text(WorkProgress("likelihood", 0, 0)) == "likelihood: 0 done"  # no total known yet
    assert (
        progress_text(MinimizeProgress(120, 3.25, "ddmin faults", 2, 5, 7))
        == "minimize: 120 runs in 3.2 s, pass ddmin faults, best so far 2 faults and 5 nonzero choices"
    )
    assert progress_text("anything else") == "anything else"


def test_the_progress_line_is_rewritten_at_most_every_interval_and_cleared() -> None:
    stream = io.StringIO()
    ticks = iter([0.0, 0.05, 0.1, 0.3])
    line = ProgressLine(stream, clock=lambda: next(ticks), interval_s=0.1)
    for text in ("one", "two (too soon)", "three", "four"):
        line.show(text)
    line.clear()
    line.clear()
    assert stream.getvalue() == "\rone\033[K\rthree\033[K\rfour\033[K\r\033[K"


def make_runner() -> tuple[CommandRunner, FakeEngine, CommandMonitor, io.StringIO, io.StringIO, io.StringIO]:
    """A runner whose engine's context hooks are a monitor drawing on ``terminal``."""
    engine = FakeEngine()
    terminal, out, err = io.StringIO(), io.StringIO(), io.StringIO()
    ticks = count()
    monitor = CommandMonitor(terminal, clock=lambda: float(next(ticks)))
    engine.progress, engine.should_stop = monitor.progress, monitor.should_stop
    runner = CommandRunner(
        engine,
        Console(file=out, width=100, color_system=None),
        Console(file=err, width=100, color_system=None),
        monitor=monitor,
    )
    return runner, engine, monitor, terminal, out, err


def test_a_long_command_reports_progress_and_the_line_is_cleared_after_it() -> None:
    runner, _engine, monitor, terminal, out, err = make_runner()
    assert runner.run_one("slow 3") is Status.OK
    assert out.getvalue() == "slow done: 3 units\n" and err.getvalue() == ""
    assert monitor.reports == 3
    assert terminal.getvalue() == (
        "\rslow unit 1 of 3\033[K\rslow unit 2 of 3\033[K\rslow unit 3 of 3\033[K\r\033[K"
    )


def test_ctrl_c_stops_a_long_command_at_its_next_check_and_keeps_its_partial_result() -> None:
    before = signal.getsignal(signal.SIGINT)
    runner, _engine, monitor, terminal, out, err = make_runner()
    assert runner.run_one("slow 5 2") is Status.INTERRUPTED
    assert monitor.stop_requested
    assert out.getvalue() == "slow stopped after 2 of 5\n"
    assert err.getvalue() == f"{STOPPED_NOTE}\n"
    assert f"\r{STOP_NOTICE}\033[K" in terminal.getvalue() and terminal.getvalue().endswith("\r\033[K")
    assert signal.getsignal(signal.SIGINT) is before
    assert runner.run_one("slow 2") is Status.OK and not monitor.stop_requested


def test_work_stopped_before_it_had_a_result_is_reported_as_stopped_not_as_an_error() -> None:
    runner, _engine, _monitor, _terminal, out, err = make_runner()
    assert runner.run_one("giveup 5 1") is Status.INTERRUPTED
    assert out.getvalue() == ""
    assert err.getvalue() == "stopped: giveup: stopped after 1 of 5 (no result)\n"


def test_ctrl_c_interrupts_any_other_command_at_once() -> None:
    before = signal.getsignal(signal.SIGINT)
    runner, _engine, _monitor, _terminal, out, err = make_runner()
    assert runner.run_one("seek 5 2") is Status.INTERRUPTED
    assert out.getvalue() == "" and err.getvalue() == "interrupted\n"
    assert signal.getsignal(signal.SIGINT) is before


def test_a_second_ctrl_c_interrupts_a_long_command_that_stopped_checking() -> None:
    runner, engine, _monitor, _terminal, out, err = make_runner()

    def stubborn(text: str) -> object:
        engine.ran.append(text)
        signal.raise_signal(signal.SIGINT)
        assert engine.should_stop()
        signal.raise_signal(signal.SIGINT)
        raise AssertionError("the second Ctrl-C did not interrupt")

    engine.execute = stubborn  # type: ignore[method-assign]
    engine.long_running = lambda text: True  # type: ignore[method-assign]
    assert runner.run_one("stubborn") is Status.INTERRUPTED
    assert (out.getvalue(), err.getvalue()) == ("", "interrupted\n")


def test_a_stopped_command_ends_a_script_with_exit_code_130() -> None:
    runner, engine, _monitor, _terminal, _out, err = make_runner()
    assert runner.run_script("slow 4 1; goto 5", "-c", echo=False) == EXIT_INTERRUPTED
    assert engine.ran == ["slow 4 1"]
    assert err.getvalue() == f"-c:1: {STOPPED_NOTE}\n"


def test_in_the_repl_ctrl_c_stops_the_command_and_the_shell_carries_on() -> None:
    runner, engine, _monitor, _terminal, out, _err = make_runner()
    with create_pipe_input() as pipe:
        repl = Repl(runner, None, pipe, DummyOutput())
        pipe.send_text(f"slow 6 3{ENTER}seek 4 1{ENTER}goto 7{ENTER}{CTRL_D}")
        assert repl.run() == 0
    assert engine.ran == ["slow 6 3", "seek 4 1", "goto 7"]
    assert out.getvalue() == "slow stopped after 3 of 6\nat 7\n"


def test_without_a_terminal_there_is_no_line_but_stop_still_works() -> None:
    engine = FakeEngine()
    monitor = CommandMonitor(None)
    engine.progress, engine.should_stop = monitor.progress, monitor.should_stop
    out = io.StringIO()
    runner = CommandRunner(engine, Console(file=out, color_system=None), monitor=monitor)
    assert runner.run_one("slow 3 1") is Status.INTERRUPTED
    assert out.getvalue().startswith("slow stopped after 1 of 3\n")
