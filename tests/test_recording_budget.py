"""``--max-record-bytes`` (recording/compact.py): a torch recording over its budget drops the training
states it kept of the past, keeps its events and its last state, and stays a recording that seeks and
replays to the same bits."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_launch import TEST_SCRIPTS

from timetravel.cli.output import byte_count
from timetravel.explore import Session
from timetravel.recording import RecordingReader, record_run
from timetravel.recording.compact import FINAL_GROUP, victims
from timetravel.scenarios import get_scenario
from timetravel.sim.elided import ElidedArray
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "docs" / "examples" / "torch" / "tiny_gpt.py"
ARGUMENTS = "--steps 66 --width 32 --layers 1 --bucket-mb 1 --context 8 --batch 1"


def _record(path: Path, budget: int | None) -> dict[str, Any]:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={GPT}", "nproc=2", f"args={ARGUMENTS}", "rank_output=quiet"])
    report, _world = record_run(
        scenario, config, 3, path, force=True, launch=launch_naming([str(GPT)]), max_record_bytes=budget
    )
    assert report["outcome"] == "pass", report["failure"]
    return report


def _param_kinds(path: Path) -> list[tuple[int, str]]:
    """(state step, the kind of r0's first parameter) at every snapshot."""
    kinds = []
    with RecordingReader.open(path) as reader:
        for manifest in reader.manifests():
            node = reader.restore(manifest).nodes["r0"]
            if "state_step" in node:
                kinds.append((node["state_step"], type(next(iter(node["params"].values()))).__name__))
    return kinds


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("budget")
    whole = folder / "whole.ttr"
    whole_report = _record(whole, None)
    size = whole.stat().st_size
    budgeted = folder / "budgeted.ttr"
    # 5% under the whole: one kept state (AdamW: three tensors a parameter, ~20k parameters; ~160 kB
    # of a ~1.1 MB file) must go, and compaction thins to BUDGET_FILL of the budget
    budget = size - size // 20
    return {
        "whole": whole,
        "whole_report": whole_report,
        "budgeted": budgeted,
        "budget": budget,
        "report": _record(budgeted, budget),
    }


def test_a_recording_over_its_budget_drops_a_state_of_the_past_and_keeps_its_last(
    recordings: dict[str, Any],
) -> None:
    budgeted, budget = recordings["budgeted"], recordings["budget"]
    assert budgeted.stat().st_size <= budget
    whole_kinds = dict(_param_kinds(recordings["whole"]))
    kinds = dict(_param_kinds(budgeted))
    assert whole_kinds[32] == whole_kinds[64] == "ndarray"  # kept states without a budget
    assert kinds[max(kinds)] == "ndarray"  # the last state stays
    assert kinds[32] == "ElidedArray" and kinds[64] == "ndarray"  # the older one went first
    assert recordings["report"]["hash_chain"] == recordings["whole_report"]["hash_chain"]


def test_a_compacted_recording_seeks_and_rebuilds_as_the_whole_one(recordings: dict[str, Any]) -> None:
    with (
        Session.open(recordings["whole"], launch=TEST_SCRIPTS) as whole,
        Session.open(recordings["budgeted"], launch=TEST_SCRIPTS) as budgeted,
    ):
        for target in (100, budgeted.end.events // 2, budgeted.end.events - 3):
            whole.goto_event(target)
            budgeted.goto_event(target)
            assert budgeted.state_hash() == whole.state_hash()
        with budgeted.with_values(), whole.with_values():
            rebuilt = budgeted.world.nodes["r0"]["params"]
            expected = whole.world.nodes["r0"]["params"]
            assert not any(
                isinstance(value, ElidedArray) for value in [*rebuilt.values(), *expected.values()]
            )
            assert all(np.array_equal(rebuilt[name], expected[name]) for name in expected)


def test_the_states_dropped_are_the_oldest_gaps_never_the_newest_or_the_last() -> None:
    groups = ["state1", "state2", "state3", "state4", FINAL_GROUP]
    sizes = dict.fromkeys(groups, 10)
    assert victims(groups, sizes, 10) == ["state1"]
    assert victims(groups, sizes, 30) == ["state1", "state2", "state3"]
    assert victims(groups, sizes, 1000) == ["state1", "state2", "state3", "state4"]  # the last stays


def test_sizes_are_read_with_their_units() -> None:
    assert byte_count("500M") == 500_000_000 and byte_count("2GiB") == 2 * 2**30
    assert byte_count("1_500_000_000") == 1_500_000_000
    for wrong in ("12 parsecs", "-5M", "1k"):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_count(wrong)


def test_a_kept_state_is_compressed_harder_than_snapshot_pages(tmp_path: Path) -> None:
    # A kept state is written a few times a run, whole: zstd level 3 stores training-like floats
    # (a random walk, as parameters drift) in ~10% fewer bytes than the snapshot pages' fast level.
    import zstandard

    from timetravel.recording.format import FRAME_HEADER, FRAME_HEADER_BYTES
    from timetravel.recording.recorder import recording_header, write_pulled
    from timetravel.recording.writer import ZSTD_LEVEL_BLOBS, RecordingWriter
    from timetravel.sim.runner import build_world

    scenario = get_scenario("gossip")
    world = build_world(scenario, scenario.resolve_config(["nodes=4"]), 1)
    header = recording_header(
        scenario, world, snapshot_every_events=256, chain_batch_events=4096, overrides=None
    )
    writer = RecordingWriter.create(tmp_path / "state.ttr", header)
    walk = np.cumsum(np.random.default_rng(3).standard_normal(1 << 18) * 1e-3).astype(np.float32)
    write_pulled(writer, [walk], "state1")
    data = (tmp_path / "state.ttr").read_bytes()
    for offset in writer.groups["state1"]:
        _marker, _kind, _flags, stored, _raw, _check, _header_check = FRAME_HEADER.unpack(
            data[offset : offset + FRAME_HEADER_BYTES]
        )
        payload = zstandard.ZstdDecompressor().decompress(
            data[offset + FRAME_HEADER_BYTES : offset + FRAME_HEADER_BYTES + stored]
        )
        fast = len(zstandard.ZstdCompressor(level=ZSTD_LEVEL_BLOBS).compress(payload))
        assert stored < 0.95 * fast, (stored, fast)
    writer.close()
