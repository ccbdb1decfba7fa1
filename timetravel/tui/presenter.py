"""The half of the debugger's App that shows what the engine answered (on the UI thread).

:class:`ResultPresenter` takes a finished :class:`~timetravel.tui.jobs.Job`'s result (a view, the
kernel spans around it, a command's Outcome) to the screen: the status line, the output pane, the
screen or pane the result is best seen in (compare, diff, explain, branches), and the event index
kept around the cursor on a worker of its own. :class:`~timetravel.tui.app.TimeTravelApp` adds
the job queue and the gestures on top; see its module docstring.
"""

from __future__ import annotations

import dataclasses
import traceback
from typing import Any

from textual.app import App
from textual.worker import Worker, WorkerState

from timetravel.explore.compare_results import CompareResult, DiffCommandResult
from timetravel.explore.explain_results import ExplainResult
from timetravel.explore.results import BranchesResult, BranchResult, CursorResult
from timetravel.tui.adapt import compare_data, diff_data, explain_rows
from timetravel.tui.engine import Engine, Outcome, Streams
from timetravel.tui.event_index import RecordingEventTable, index_events, window_for
from timetravel.tui.jobs import CURSOR_KINDS, Job
from timetravel.tui.model import CursorView
from timetravel.tui.screens import CompareScreen, DiffScreen, MainScreen
from timetravel.tui.widgets.explain_pane import ExplainPane
from timetravel.tui.widgets.status_line import StatusLine

GPU_KEY = "gpu"
"""A node whose state holds this key has GPU streams (their spans are sampled around the cursor)."""


class ResultPresenter(App[None]):
    """Shows engine results; the App that runs the jobs sets the state declared here."""

    engine: Engine
    main: MainScreen
    recording_path: str
    view: CursorView | None
    history: list[str]
    events_table: RecordingEventTable | None
    events_key: tuple[str, tuple[int, int]] | None
    _indexing: bool

    @property
    def status(self) -> StatusLine:
        return self.main.query_one(StatusLine)

    def submit(self, job: Job) -> None:
        """Queue ``job`` (the App's job queue)."""
        raise NotImplementedError

    def _finish(self, job: Job, result: Any) -> None:
        if job.kind == "follow":
            if isinstance(result, CursorView):
                self._followed(result)
            return
        if isinstance(result, CursorView):
            self._show_view(result)
            self.status.say(f"{result.title} · {result.status} · : commands, ? keys")
        elif isinstance(result, Streams):
            self._show_streams(result)
        elif isinstance(result, Outcome):
            self._apply(job, result)
            if job.kind == "opening" and result.error is None and result.view is not None:
                where = "at the failure" if result.lines else "no failure in this run"
                self.status.say(f"{result.view.title} · {where} · : commands, ? keys")

    def _followed(self, view: CursorView) -> None:
        """The recording grew: show the new view and index its events again."""
        if self.events_table is not None:
            self.events_table.close()
        self.events_table, self.events_key = None, None
        self._show_view(view)
        if not view.in_progress:
            self.status.say(f"{view.title} · the recording is finished · {view.status}")

    def _failed(self, job: Job, error: BaseException) -> None:
        self.status.error(f"internal error in {job.label}: {type(error).__name__}: {error}")
        for line in traceback.format_exception(error):
            self.main.write_output(line.rstrip("\n"))
        if job.kind in CURSOR_KINDS:
            self.main.sync_cursor()

    def _apply(self, job: Job, outcome: Outcome) -> None:
        self.history += outcome.lines[: len(outcome.results) + (1 if outcome.error else 0)]
        if job.kind != "seek":
            for line in outcome.lines:
                self.main.write_output(f"› {line}")
        if outcome.error is not None:
            self.status.error(outcome.error)
            self.main.write_output(f"  {outcome.error}")
        else:
            for line in outcome.text:
                self.main.write_output(line)
            self.status.say(outcome.text[0] if outcome.text else f"{job.label}: done")
        if outcome.view is not None:
            self._show_view(outcome.view)
        elif job.kind in CURSOR_KINDS:
            self.main.sync_cursor()
        if outcome.error is None:
            self._present(job, outcome)

    def _present(self, job: Job, outcome: Outcome) -> None:
        """Open what the result is best seen in: a screen, a pane."""
        result = outcome.result
        unit = self.engine.unit
        if outcome.diff is not None:
            worlds = outcome.diff
            self.push_screen(
                DiffScreen(
                    worlds.names, worlds.documents, worlds.path, worlds.differing, worlds.at_ns, worlds.unit
                )
            )
        elif outcome.compare is not None:
            self.push_screen(CompareScreen(outcome.compare))  # listed at the first divergence
        elif job.kind != "command":
            return
        elif isinstance(result, CompareResult):
            loss_metric = self.engine.session.scenario.view.loss_metric
            self.push_screen(CompareScreen(compare_data(result, None, unit, loss_metric=loss_metric)))
        elif isinstance(result, DiffCommandResult):
            branches = self.view.branches if self.view is not None else ()
            at_divergence = "--at" not in job.args[0].split()
            screen = CompareScreen(
                diff_data(result, branches, unit, self.engine.session.scenario.view.loss_metric)
            )
            screen.diff_at_ns = None if at_divergence else result.at_ns
            self.push_screen(screen)
        elif isinstance(result, ExplainResult):
            self._show_explain(result)
        elif isinstance(result, (BranchResult, BranchesResult)):
            self.main.action_pane("branches")
        elif not isinstance(result, CursorResult):
            self.main.action_pane("output")

    def _show_explain(self, result: ExplainResult) -> None:
        """The chain in the explain pane (added to the main screen's panes the first time)."""
        panes = self.main.query_one("#panes")
        found = panes.query(ExplainPane)
        pane = found.first() if found else ExplainPane(id="explain", classes="pane")
        if not found:
            panes.mount(pane)
        headline, rows = explain_rows(result, self.engine.unit)
        pane.branch, pane.headline, pane.rows = result.branch, headline, rows
        self.main.action_pane("explain")

    def _show_view(self, view: CursorView) -> None:
        previous = self.view
        events = self.events_table if self.events_key and self.events_key[0] == view.branch else None
        if events is not None:
            events.remember(view.event_rows)
        keep_streams = previous is not None and previous.branch == view.branch
        view = dataclasses.replace(
            view,
            events=events,
            spans=previous.spans if keep_streams and previous is not None else (),
            races=previous.races if keep_streams and previous is not None else (),
        )
        self.view = view
        self.main.show(view)
        # Background work starts once the new view is drawn: a worker competes for the
        # interpreter (the GIL) with the UI thread, and this frame is the one the user waits on.
        self.call_after_refresh(self._follow_view, view)

    def _follow_view(self, view: CursorView) -> None:
        """Index the events and sample the kernel spans around a view that is now on screen."""
        if view is not self.view:
            return
        self._index_around(view)
        if _has_gpu(view):
            self.submit(Job("streams", label="streams"))

    def _show_streams(self, streams: Streams) -> None:
        view = self.view
        if view is None or (view.branch, view.event_number) != (streams.branch, streams.event):
            return
        self.view = dataclasses.replace(view, spans=streams.spans, races=streams.races)
        self.main.show_streams(streams.spans, streams.races)

    # -- the event index --------------------------------------------------------------------------

    def _index_around(self, view: CursorView) -> None:
        """Index the events around the cursor unless the index holds them (one index at a time)."""
        if view.events_total <= 0 or self._indexing:
            return
        key = self.events_key
        if key is not None and key[0] == view.branch:
            first, last = key[1]
            if first <= max(view.event_number, 1) <= last:
                return
        window = window_for(view.event_number, view.events_total)
        wanted = (view.branch, window)
        self._indexing = True
        self.run_worker(
            lambda: (wanted, index_events(self.recording_path, view.branch, window)),
            name="index",
            group="index",
            thread=True,
            exit_on_error=False,
        )

    def _index_done(self, worker: Worker[Any]) -> None:
        if worker.state not in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            return
        self._indexing = False
        if worker.state == WorkerState.ERROR:
            self.status.error(f"the event log could not be indexed: {worker.error}")
            return
        if worker.state != WorkerState.SUCCESS or worker.result is None:
            return
        key, table = worker.result
        view = self.view
        if view is None or key[0] != view.branch:
            table.close()
        else:
            if self.events_table is not None:
                self.events_table.close()
            self.events_table, self.events_key = table, key
            table.remember(view.event_rows)
            self.view = dataclasses.replace(view, events=table)
            self.main.show_events(table)
        if self.view is not None:
            self._index_around(self.view)  # the cursor may have moved on meanwhile


def _has_gpu(view: CursorView) -> bool:
    document = view.document if isinstance(view.document, dict) else {}
    nodes = document.get("nodes", {})
    return any(isinstance(state, dict) and GPU_KEY in state for state in nodes.values())
