"""``timetravel bench torch`` at scale (issue 18 part 4): how many ranks of the DDP example fit in 16 GiB."""

from __future__ import annotations

import os

import pytest

from timetravel.bench import torch_scale


def test_memory_bytes_reads_this_process_pss_and_uss() -> None:
    sizes = torch_scale.memory_bytes(os.getpid())
    assert sizes is not None
    pss, uss = sizes
    assert 0 < uss <= pss * 2 and pss > 1 << 20  # a Python process with numpy holds megabytes


def test_memory_bytes_of_a_gone_process_is_none() -> None:
    assert torch_scale.memory_bytes(2**22 + 12345) is None


def test_fit_recovers_a_line() -> None:
    fixed, slope = torch_scale._fit(
        [(4.0, 100.0 + 4 * 80.0), (8.0, 100.0 + 8 * 80.0), (16.0, 100.0 + 16 * 80.0)]
    )
    assert fixed == pytest.approx(100.0) and slope == pytest.approx(80.0)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_scale_bench_quick_reports_ranks_in_16gib() -> None:
    figures = torch_scale.run_scale_bench(quick=True)
    assert figures["torch_ranks_in_16gib"] > 0
    assert figures["torch_rank_pss_mib"] > 0 and figures["torch_rank_uss_mib"] > 0
    measured = figures["torch_scale_measured"]
    assert [run["ranks"] for run in measured] == list(torch_scale.RANK_COUNTS_QUICK)
    assert measured[-1]["pss_mib"] > measured[0]["pss_mib"]  # more ranks, more memory
    assert "extrapolated" in figures["torch_scale_method"]
