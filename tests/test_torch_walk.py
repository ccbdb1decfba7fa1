"""The walk of one collective through the coordinator: each event's handling is a straight line.

One all_reduce of two ranks is traced with ``sys.setprofile`` from the poll that reads each rank's
call to the poll that hands it the result. While the coordinator handles any one of those events, no
coordinator-side file (timetravel/torch/world/) is *entered* — called into from another file — more
than twice: the handler calls each part it needs once (the entry's faults, its digests, the
completion, the timing, the host that carries out what c10d decided) instead of bouncing between
scenario, c10d and the driver (issue 29 measured 35 stays in 13 files for ``c10d.on_call``, c10d
entered 9 times and the scenario 6). A return is not an entry: it ends a call the file made.
The polls that start the rank processes (forking, the working directory) are not part of the walk.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.torch.world.specs import launch_naming

SCRIPT = Path(__file__).resolve().parent / "torch_scripts" / "one_all_reduce.py"
WORLD = str(Path(__file__).resolve().parent.parent / "timetravel" / "torch" / "world") + "/"
KERNEL = "timetravel/sim/kernel.py"
ENTRIES_PER_FILE_MAX = 2


class Walk:
    """Per handled event: its handler, its event, and how often each coordinator-side file was entered."""

    def __init__(self) -> None:
        self.handled: list[dict[str, Any]] = []
        self._current: dict[str, Any] | None = None
        self._depth = 0

    def profile(self, frame: Any, event: str, _arg: Any) -> None:
        if event == "return" and self._current is not None:
            self._depth -= 1
            if self._depth == 0:
                self.handled.append(self._current)
                self._current = None
            return
        if event != "call":
            return
        callee = frame.f_code.co_filename
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        if self._current is None:
            if caller.endswith(KERNEL) and callee.startswith(WORLD) and "event" in frame.f_locals:
                handled = frame.f_locals["event"]
                name = f"{Path(callee).name}:{frame.f_code.co_name}"
                self._current = {"handler": name, "event": handled, "entries": collections.Counter()}
                self._current["entries"][Path(callee).name] += 1
                self._depth = 1
            return
        self._depth += 1
        if callee.startswith(WORLD) and caller != callee:
            self._current["entries"][Path(callee).name] += 1


def traced_run() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={SCRIPT}", "nproc=2", "rank_output=quiet"])
    walk = Walk()
    sys.setprofile(walk.profile)
    try:
        report, _world = run_report(scenario, config, 0, launch=launch_naming([str(SCRIPT)]))
    finally:
        sys.setprofile(None)
    return report, walk.handled


def test_each_event_of_one_all_reduce_enters_each_coordinator_file_at_most_twice() -> None:
    report, handled = traced_run()
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["collectives"] == 1
    started: set[str] = set()
    walk = []
    for entry in handled:
        event = entry["event"]
        if event.kind == "poll" and event.dst not in started:
            started.add(event.dst)  # the poll that forks the rank process: start-up, not the walk
            continue
        walk.append(entry)
    kinds = collections.Counter((entry["event"].dst, entry["event"].kind) for entry in walk)
    # the collective's events: both calls and waits reach c10d, and each rank's result comes back in a poll
    assert kinds[("c10d", "call")] == 2 and kinds[("c10d", "wait")] == 2
    assert kinds[("r0", "poll")] >= 1 and kinds[("r1", "poll")] >= 1
    bounced = [
        (entry["handler"], entry["event"].dst, entry["event"].kind, dict(entry["entries"]))
        for entry in walk
        if max(entry["entries"].values()) > ENTRIES_PER_FILE_MAX
    ]
    assert bounced == []


def test_the_tracer_counts_an_entry_for_each_call_from_another_file(tmp_path: Path) -> None:
    """The count above is only worth its name if a helper called three times counts three."""
    walk = Walk()
    frames = []

    class Frame:
        def __init__(self, filename: str, name: str, back: Any, local: dict[str, Any]) -> None:
            self.f_code = type("Code", (), {"co_filename": filename, "co_name": name})()
            self.f_back = back
            self.f_locals = local
            frames.append(self)

    kernel = Frame("/x/" + KERNEL, "_run_segment_python", None, {})
    handler = Frame(WORLD + "c10d.py", "on_call", kernel, {"event": object()})
    walk.profile(handler, "call", None)
    for _ in range(3):
        helper = Frame(WORLD + "faults.py", "active", handler, {})
        walk.profile(helper, "call", None)
        walk.profile(helper, "return", None)
    walk.profile(handler, "return", None)
    assert walk.handled[0]["entries"] == {"c10d.py": 1, "faults.py": 3}
