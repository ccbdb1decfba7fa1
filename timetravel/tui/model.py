"""The plain data the TUI's widgets show: one small frozen record per thing on screen.

Widgets never reach into a World, a Session or a recording. A front end (the App, a test, a
script) turns whatever it has into these records and sets them as widget attributes; widgets
post messages back up when the user asks for something. Keeping the records plain (ints, floats,
strings, tuples) is what lets every widget be tested on its own with hand-written data, and lets
one adapter (``timetravel.tui.feed``) serve both a live kernel run and a recording. A row of the
event log is the explore engine's own plain record (``EventRow``, from ``explore.results``).

Times are integer nanoseconds everywhere, as in the kernel; only the widgets format them, in the
recording's display unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from timetravel.explore.results import EventRow

MARK_KINDS = ("snapshot", "fault", "branch", "failure", "cursor")
"""What a timeline mark can be; later kinds win a column shared with earlier ones."""

RANK_STATES = ("healthy", "slow", "partitioned", "hung", "diverged", "crashed", "nan")
"""A rank's condition, from least to most severe: the rank grid sorts its outliers by this order."""

OUTCOMES = ("pass", "fail", "running", "cancelled", "unknown")


@dataclass(frozen=True)
class TimeMark:
    """Something that happened at one moment and deserves a glyph on the timeline."""

    t_ns: int
    kind: str
    label: str = ""

    def __post_init__(self) -> None:
        if self.kind not in MARK_KINDS:
            raise ValueError(f"mark kind must be one of {MARK_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class CollectiveSpan:
    """One rank's part in one collective: from its call to the result reaching it.

    ``t_end_ns`` is None when the result never reached the rank (a hang: it waits still)."""

    rank: str
    op: str
    group: str
    seq: int
    t_start_ns: int
    t_end_ns: int | None = None

    @property
    def label(self) -> str:
        """``all_reduce 0#9``: the op, then the collective's key (group and sequence number)."""
        return f"{self.op} {self.group}#{self.seq}"


@dataclass(frozen=True)
class StepMark:
    """A rank's optimizer step ``step`` (1 for the first) ended at ``t_ns``."""

    rank: str
    step: int
    t_ns: int


@dataclass(frozen=True)
class FlightRow:
    """One rank in a hang's flight recorder: its last collectives and what it waits on."""

    rank: str
    status: str
    last_entered: str = ""
    last_completed: str = ""
    what: str = ""
    """The last entered collective's op and tensors (``all_reduce(sum) float32[]``)."""
    waits_on: tuple[str, ...] = ()
    waited_by: tuple[str, ...] = ()
    """The ranks that wait for this one (it never entered their collective)."""
    t_enter_ns: int | None = None


@dataclass(frozen=True)
class TimelineData:
    """The whole run along logical time: its extent, its marks and the curves drawn under it.

    ``loss`` and ``likelihood`` are ``(t_ns, value)`` points in time order; a likelihood value is
    the failure rate (0..1) of futures branched at that time.
    """

    t_start_ns: int
    t_end_ns: int
    unit: str = "ms"
    marks: tuple[TimeMark, ...] = ()
    loss: tuple[tuple[int, float], ...] = ()
    likelihood: tuple[tuple[int, float], ...] = ()
    lanes: tuple[str, ...] = ()
    """Ranks drawn as a row each under the curves (a torch run's), with their collectives and steps."""
    collectives: tuple[CollectiveSpan, ...] = ()
    steps: tuple[StepMark, ...] = ()

    def __post_init__(self) -> None:
        if self.t_end_ns < self.t_start_ns:
            raise ValueError("a timeline ends before it starts")


@dataclass(frozen=True)
class RankCell:
    """One rank at the cursor: its condition and the counters that show who is behind.

    ``waiting_on`` names what the rank is blocked on (a peer, a collective), as a flight recorder
    would say it; empty when it is not waiting.
    """

    name: str
    state: str = "healthy"
    step: int = 0
    collective_seq: int = 0
    last_progress_ns: int = 0
    waiting_on: str = ""

    def __post_init__(self) -> None:
        if self.state not in RANK_STATES:
            raise ValueError(f"rank state must be one of {RANK_STATES}, got {self.state!r}")


@dataclass(frozen=True)
class KernelSpan:
    """A kernel on one GPU stream of one rank, from launch to completion."""

    rank: str
    stream: str
    name: str
    t_start_ns: int
    t_end_ns: int
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    span_id: str = ""

    @property
    def key(self) -> str:
        """A name unique within a rank: the id when given, else stream, name and start."""
        return self.span_id or f"{self.stream}:{self.name}@{self.t_start_ns}"


@dataclass(frozen=True)
class RaceEdge:
    """Two kernels of one rank that touch ``buffer`` with no ordering edge between them."""

    rank: str
    buffer: str
    first: str
    second: str


class EventSource(Protocol):
    """Random access to a run's events, so the log fetches only the rows it shows.

    A source over a recording reads frames on demand; the in-memory one (``feed.EventTable``)
    holds columns. ``filtered`` returns a source of the matching rows, in run order.
    """

    def __len__(self) -> int: ...

    def row(self, index: int) -> EventRow: ...

    def index_at_time(self, t_ns: int) -> int:
        """Index of the last row with time <= t_ns, or -1 when there is none."""
        ...

    def index_of_number(self, number: int) -> int:
        """Index of the row for event ``number``, or of the first row after it; -1 past the end."""
        ...

    def filtered(self, node: str | None = None, kind: str | None = None) -> EventSource: ...

    def node_names(self) -> list[str]: ...

    def kind_names(self) -> list[str]: ...


@dataclass(frozen=True)
class BranchInfo:
    """One run in the branch tree: ``main`` (the recording) or a future branched from a parent."""

    name: str
    parent: str | None = None
    at_ns: int | None = None
    outcome: str = "unknown"
    failure: str = ""
    changes: str = ""
    progress: float | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")


@dataclass(frozen=True)
class DiffEntry:
    """One path whose value differs between two worlds (the explore engine's diff, one line of it)."""

    path: str
    change: str
    summary: str = ""


@dataclass(frozen=True)
class Divergence:
    """The first event whose effects differ between two runs."""

    t_ns: int
    node: str | None
    kind: str
    event_a: int | None = None
    event_b: int | None = None
    """The diverging event's number on each side (None: that side has no such event)."""
    event_t_ns: int | None = None
    """The diverging event's own time when ``t_ns`` is the scenario's moment instead (a torch
    collective's completion, a modelled transfer after the event that completed it)."""


@dataclass(frozen=True)
class CompareData:
    """Two runs side by side at one time: outcomes, the differing paths and both loss curves."""

    a: BranchInfo
    b: BranchInfo
    at_ns: int
    unit: str = "ms"
    first_divergence: Divergence | None = None
    entries: tuple[DiffEntry, ...] = ()
    loss_a: tuple[tuple[int, float], ...] = ()
    loss_b: tuple[tuple[int, float], ...] = ()
    reference: tuple[str, ...] = ()
    """``compare --reference FILE``: one verdict line per branch (first step outside rtol, or none)."""
    reference_what: str = ""
    """The compared metric and node (``loss on r0``); the three curves below are by step."""
    reference_curve: tuple[tuple[int, float], ...] = ()
    reference_a: tuple[tuple[int, float], ...] = ()
    reference_b: tuple[tuple[int, float], ...] = ()
    ops: tuple[str, ...] = ()
    """``diff A B --ops`` on a torch run: the first differing ops, one line each (render_ops.py)."""


@dataclass(frozen=True)
class CursorView:
    """Everything the main screen shows at one position of one run, as plain data.

    The front end builds one of these after every seek (from a Session, or from a kernel run in
    memory) and hands it to the screen, which sets each widget's attributes from it.
    """

    title: str
    unit: str
    cursor_ns: int
    timeline: TimelineData
    ranks: tuple[RankCell, ...] = ()
    spans: tuple[KernelSpan, ...] = ()
    races: tuple[RaceEdge, ...] = ()
    events: EventSource | None = None
    document: object = None
    branches: tuple[BranchInfo, ...] = ()
    branch: str = "main"
    event_number: int = 0
    events_total: int = 0
    event_rows: tuple[EventRow, ...] = ()
    """The rows around the cursor, read on the worker that built the view, so that drawing the
    log after a seek decodes nothing on the UI thread (see ``EventTable.remember``)."""
    status: str = ""
    in_progress: bool = False
    """The recording is still being written: the App reloads it as it grows (Engine.follow)."""
    failure_node: str = ""
    """The node the branch's failure names (the streams pane lists it first)."""
    flight: tuple[FlightRow, ...] = ()
    """A hang's flight recorder, when the world at the cursor has one (at or after the hang)."""
    flight_title: str = ""
