"""The progress bar's line: seeds done, seeds/s, failures so far and the ETA."""

from __future__ import annotations

import io

from timetravel.farm.progress import ProgressBar, format_duration


def test_the_line_shows_rate_failures_and_eta() -> None:
    bar = ProgressBar(total=1000, label="gossip", stream=io.StringIO())
    bar.started = 100.0
    bar.done, bar.failures = 250, 7
    line = bar.line(now=110.0, columns=100)  # 250 seeds in 10 s: 25/s, 750 left: 30 s
    assert line.endswith("250/1,000 seeds  25.0 seeds/s  7 failing  ETA 30s")
    assert line.startswith("gossip [") and len(line) <= 100
    bar_text = line[line.index("[") + 1 : line.index("]")]
    assert bar_text.count("#") * 4 == len(bar_text)


def test_durations_read_naturally() -> None:
    assert [format_duration(s) for s in (0.4, 59, 61, 3600 * 2 + 60 * 5)] == ["0s", "59s", "1m01s", "2h05m"]


def test_finish_leaves_the_last_line_and_a_newline() -> None:
    stream = io.StringIO()
    bar = ProgressBar(total=2, label="p", stream=stream)
    bar.update(2, 1)
    bar.finish()
    text = stream.getvalue()
    assert text.startswith("\r\x1b[2Kp [#") and "#] 2/2 seeds  " in text
    assert text.endswith("1 failing  ETA 0s\n") and text.count("\n") == 1
