"""The time-travel debugger: a Textual App over one open recording.

Everything the user does is a line of the command language, run by the explore engine through
:class:`~timetravel.tui.engine.Engine`: scrubbing the timeline runs ``goto 950ms``, choosing an
event ``goto #1200``, choosing a branch ``goto 950ms --branch b1``, asking to compare two
branches ``compare main b1`` then ``diff main b1``, opening a differing path
``diff main b1 --at T --path P`` (and both worlds at T for the side-by-side screen), choosing a
path in the state inspector ``print P``. Typed commands (``:``) run the same way. Answers go
to the status line (their first line) and the output pane (all of it, after ``› command``).

**Workers.** The App never calls the engine on the UI thread. Engine jobs run one at a time on a
thread worker (:meth:`TimeTravelApp.submit`): a quick one (a seek, ``print``) queues behind the
one running, a newer scrub replaces a queued one (only the latest position matters), and a long
one (branch, fanout, likelihood, divergence, minimize, find-first, compare, diff: the commands
whose spec says ``long_running``) shows its progress in the status line and stops at its next
check when the user presses escape (the context's ``should_stop``). While a long job runs, other
commands are refused with a message rather than queued behind it: a scrub that waits a minute
for a branch to finish is worse than one that says so. Two kinds of background work follow a
move and do not hold up the next one: sampling the kernel spans around the cursor (an engine
job, dropped when the cursor moves on) and indexing the event log (on its own reader, so on a
worker of its own).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from textual import events, on
from textual.app import App
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import Input
from textual.worker import Worker, WorkerState

from timetravel.tui.collector import IdleCollector
from timetravel.tui.engine import Engine, is_long, progress_text
from timetravel.tui.event_index import RecordingEventTable
from timetravel.tui.jobs import CURSOR_KINDS, Job, run_job
from timetravel.tui.keymap import keymap_rows
from timetravel.tui.keymap_screen import KeyMapScreen
from timetravel.tui.model import CursorView
from timetravel.tui.palette import CommandsProvider
from timetravel.tui.presenter import ResultPresenter
from timetravel.tui.screens import CompareScreen, DiffScreen, MainScreen
from timetravel.tui.widgets import (
    BranchTree,
    CommandLine,
    CompareView,
    EventLog,
    RankGrid,
    StateInspector,
    StreamsView,
    Timeline,
)
from timetravel.tui.widgets.explain_pane import ExplainPane
from timetravel.tui.widgets.status_line import StatusLine

QUEUED_JOBS_MAX = 32
"""Commands waiting behind the running one (typing faster than the engine answers)."""
PROGRESS_INTERVAL_S = 0.1
"""At most this often a long job's progress reaches the screen (the UI thread redraws it)."""
COLLECTOR_TICK_S = 1.0
"""How often the App asks whether a full garbage collection may run (timetravel.tui.collector)."""
FOLLOW_INTERVAL_S = 1.0
"""How often a recording still being written is checked for growth (Engine.follow)."""
REFUSAL_SHOWN_S = 2.0
"""How long "busy: ... is running" stays in the status line before progress replaces it."""


class TimeTravelApp(ResultPresenter):
    """The debugger over one recording. See the module docstring."""

    TITLE = "timetravel"
    COMMANDS: ClassVar = App.COMMANDS | {CommandsProvider}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "colon",
            "command_line",
            "command",
            priority=True,
            tooltip="open the command line (the command language)",
        ),
        Binding("question_mark", "keymap", "keys", tooltip="show every key"),
        Binding(
            "greater_than_sign",
            "by_collective(1)",
            "next collective",
            show=False,
            tooltip="step to the next completed collective (torch runs: step --collective)",
        ),
        Binding(
            "less_than_sign",
            "by_collective(-1)",
            "prev collective",
            show=False,
            tooltip="back to the previous completed collective (torch runs: back --collective)",
        ),
        Binding(
            "y",
            "explain",
            "why",
            tooltip="explain the failure: its causal chain in a pane (enter jumps there)",
        ),
        Binding("escape", "cancel_work", "cancel", show=False, tooltip="cancel the running long command"),
        Binding("q", "quit", "quit", tooltip="quit"),
    ]

    def __init__(
        self, engine: Engine, *, path: str, first_commands: Sequence[str] = (), open_at_failure: bool = False
    ) -> None:
        super().__init__()
        self.engine = engine
        self.open_at_failure = open_at_failure and not first_commands
        """Open with the cursor at the failure (``timetravel tui`` without ``--at``)."""
        self.path = path
        """The recording as the user named it (shown); the file is ``recording_path``."""
        self.recording_path = engine.path
        self.first_commands = tuple(first_commands)
        self.view: CursorView | None = None
        self.main = MainScreen()
        self.running: Job | None = None
        self.queue: list[Job] = []
        self.history: list[str] = []
        """Every command line the engine ran, in order (what a user would type to get here)."""
        self.events_table: RecordingEventTable | None = None
        self.events_key: tuple[str, tuple[int, int]] | None = None
        self._indexing = False
        self._focus_before: Widget | None = None
        self._progress_hidden_until = 0.0
        self.collector = IdleCollector()
        self._engine_worker: Worker[Any] | None = None
        self._jobs: dict[Worker[Any], Job] = {}

    # -- start and stop ---------------------------------------------------------------------------

    def get_default_screen(self) -> MainScreen:
        return self.main

    def on_ready(self) -> None:
        """The first frame is on screen: open the view (on a worker) and run ``--at``."""
        self.collector.start()
        self.set_interval(COLLECTOR_TICK_S, self._collect_when_idle)
        self.set_interval(FOLLOW_INTERVAL_S, self._follow_recording)
        self.main.query_one(StatusLine).say(f"opening {self.path} …")
        self.submit(Job("opening" if self.open_at_failure else "view", label="open"))
        for line in self.first_commands:
            self.run_command(line)

    def _follow_recording(self) -> None:
        """While the recording is in progress, reload it as it grows (when no other job runs:
        following never delays what the user asked for)."""
        if self.view is not None and self.view.in_progress and self.is_idle:
            self.submit(Job("follow", label="follow"))

    def _collect_when_idle(self) -> None:
        self.collector.tick(busy=not self.is_idle)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseDown, events.MouseScrollDown, events.MouseScrollUp)):
            self.collector.activity()
        await super().on_event(event)

    def on_unmount(self) -> None:
        self.collector.stop()
        if self.running is not None:
            self.running.stop.set()
        if self.events_table is not None:
            self.events_table.close()

    @property
    def is_idle(self) -> bool:
        """True when no engine job runs or waits and the event log is not being indexed."""
        return self.running is None and not self.queue and not self._indexing

    @property
    def is_busy(self) -> bool:
        """True while a long command runs (escape cancels it)."""
        return self.running is not None and self.running.long

    # -- gestures: every one is a command line ----------------------------------------------------

    def run_command(self, line: str, kind: str = "command") -> None:
        """Run one command line of the command language (typed, chosen in the palette, or a gesture)."""
        line = line.strip()
        if not line:
            return
        self.submit(Job(kind, (line,), label=line.split()[0], long=is_long(line)))

    @on(Timeline.Scrubbed)
    def scrubbed(self, message: Timeline.Scrubbed) -> None:
        self.run_command(f"goto {self.engine.time_text(message.t_ns)}", kind="seek")

    @on(EventLog.EventChosen)
    def event_chosen(self, message: EventLog.EventChosen) -> None:
        self.run_command(f"goto #{message.number}", kind="seek")

    @on(BranchTree.BranchChosen)
    def branch_chosen(self, message: BranchTree.BranchChosen) -> None:
        if self.view is None or message.name == self.view.branch:
            return
        self.run_command(f"goto {self.engine.time_text(self.view.cursor_ns)} --branch {message.name}")

    @on(BranchTree.CompareRequested)
    def compare_requested(self, message: BranchTree.CompareRequested) -> None:
        self.submit(Job("compare", (message.a, message.b), label="compare", long=True))

    @on(CompareView.PathChosen)
    def diff_path_chosen(self, message: CompareView.PathChosen) -> None:
        if message.path == "…":
            return
        screen = message.view.screen
        at_ns = screen.diff_at_ns if isinstance(screen, CompareScreen) else message.at_ns
        args = (message.a, message.b, message.path, at_ns)
        self.submit(Job("diff", args, label="diff", long=True))

    @on(ExplainPane.LinkChosen)
    def explain_link_chosen(self, message: ExplainPane.LinkChosen) -> None:
        where = f"#{message.event}" if message.event is not None else self.engine.time_text(message.t_ns or 0)
        self.run_command(f"goto {where} --branch {message.branch}", kind="seek")

    def action_by_collective(self, direction: int) -> None:
        # a relative move: queued as a command (queued seeks replace one another; each press counts)
        self.run_command("step --collective" if direction > 0 else "back --collective")

    def action_explain(self) -> None:
        branch = self.view.branch if self.view is not None else ""
        self.run_command(f"explain {branch}".strip())

    @on(StateInspector.PathChosen)
    def path_chosen(self, message: StateInspector.PathChosen) -> None:
        if message.inspector.screen is self.main:
            self.run_command(f"print {message.path or '/'}")

    @on(CommandLine.CommandSubmitted)
    def command_submitted(self, message: CommandLine.CommandSubmitted) -> None:
        self._leave_command_line()
        self.run_command(message.text)

    @on(CommandLine.Dismissed)
    def command_dismissed(self) -> None:
        self._leave_command_line()

    def _leave_command_line(self) -> None:
        """Give the focus back to the widget that had it before ``:`` (the timeline at first)."""
        before = self._focus_before
        self._focus_before = None
        if before is not None and before.is_attached and before.screen is self.main:
            before.focus()
        else:
            self.main.action_focus_timeline()

    # the palette's host (timetravel.tui.palette.CommandHost)
    def prefill_command(self, text: str) -> None:
        line = self._command_line()
        line.value = text
        line.cursor_position = len(text)

    def submit_command(self, text: str) -> None:
        self.run_command(text)

    # -- App-level keys ---------------------------------------------------------------------------

    def _command_line(self) -> CommandLine:
        while self.screen is not self.main:
            self.pop_screen()
        line = self.main.query_one(CommandLine)
        if self.focused is not line:
            self._focus_before = self.focused
        self.set_focus(line)  # now, not after the keys already queued (a pasted ":goto 80" types into it)
        return line

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``:`` is a priority key (the App moves the focus before the keys typed after it are
        handed to a widget: Textual forwards each key to the focused widget as it arrives, so a
        burst such as a pasted ``:goto 80`` would otherwise type into the timeline); while a text
        field has the focus it is just a character (``f3:t_end=990ms``)."""
        return not (action == "command_line" and isinstance(self.focused, Input))

    def action_command_line(self) -> None:
        self._command_line()

    def action_keymap(self) -> None:
        if not isinstance(self.screen, KeyMapScreen):
            self.push_screen(KeyMapScreen(keymap_rows(KEYMAP_SCOPES)))

    def action_cancel_work(self) -> None:
        job = self.running
        if job is None or not job.long:
            return
        job.stop.set()
        self.status.busy(f"cancelling {job.label}", None)

    # -- the job queue ----------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job`` (see the module docstring for what is refused, replaced or dropped)."""
        if self.is_busy and job.kind not in ("streams",):
            assert self.running is not None
            self.status.error(f"busy: {self.running.label} is running · esc cancels it")
            self._progress_hidden_until = time.monotonic() + REFUSAL_SHOWN_S
            if job.kind in CURSOR_KINDS:
                self.main.sync_cursor()
            return
        if job.kind not in ("view", "opening", "follow"):  # the spans of a position the cursor leaves
            self.queue = [queued for queued in self.queue if queued.kind != "streams"]
        while job.kind == "seek" and self.queue and self.queue[-1].kind == "seek":
            self.queue.pop()  # only the latest position matters (commands queued before it keep theirs)
        if len(self.queue) >= QUEUED_JOBS_MAX:
            self.status.error(f"{len(self.queue)} commands are waiting; try again in a moment")
            return
        self.queue.append(job)
        self._next()

    def _next(self) -> None:
        if self.running is not None or not self.queue:
            return
        self.collector.activity()
        job = self.queue.pop(0)
        self.running = job
        if job.long:
            self.status.busy(job.label, None)
        worker = self.run_worker(
            lambda: self._work(job), name=job.kind, group="engine", thread=True, exit_on_error=False
        )
        self._jobs[worker] = job
        self._engine_worker = worker

    def _work(self, job: Job) -> Any:
        """Runs on the worker thread."""
        return run_job(self.engine, job, self._progress_reporter(job) if job.long else None)

    def _progress_reporter(self, job: Job) -> Callable[[Any], None]:
        last = [0.0]

        def report(progress: Any) -> None:  # on the worker thread
            now = time.monotonic()
            if now - last[0] < PROGRESS_INTERVAL_S:
                return
            last[0] = now
            text, fraction = progress_text(progress, job.label)
            self.call_from_thread(self._show_progress, job, text, fraction)

        return report

    def _show_progress(self, job: Job, text: str, fraction: float | None) -> None:
        if job is self.running and not job.stop.is_set() and time.monotonic() >= self._progress_hidden_until:
            self.status.busy(text, fraction)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker.group == "index":
            self._index_done(worker)
            return
        job = self._jobs.get(worker)
        if job is None or event.state not in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            return
        del self._jobs[worker]
        self.running = None
        if job.long:
            self.status.idle()
        try:
            if event.state == WorkerState.SUCCESS:
                self._finish(job, worker.result)
            elif event.state == WorkerState.ERROR and worker.error is not None:
                self._failed(job, worker.error)
        finally:
            self._next()


KEYMAP_SCOPES: tuple[tuple[str, type[Any]], ...] = (
    ("anywhere", TimeTravelApp),
    ("main screen", MainScreen),
    ("timeline", Timeline),
    ("ranks", RankGrid),
    ("events", EventLog),
    ("state", StateInspector),
    ("streams", StreamsView),
    ("branches", BranchTree),
    ("why", ExplainPane),
    ("compare", CompareScreen),
    ("compare", CompareView),
    ("diff", DiffScreen),
    ("command line", CommandLine),
    ("key map", KeyMapScreen),
)
"""Where keys work, in the order the ``?`` screen and docs/tui.md list them."""
