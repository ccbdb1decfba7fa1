"""A bigger rewind workload for ``bench torch`` (issue 33): how a recording grows with the model, the
ranks and the steps.

docs/examples/torch/tiny_gpt.py with ``BIG_ARGUMENTS`` — one block of width 912: 10.0M parameters,
AdamW — on ``BIG_RANKS`` ranks for ``BIG_STEPS`` optimizer steps (one context of 8 tokens a rank and
step, so that a step's compute stays small beside what a 40 MB model costs the runtime: its DDP
all-reduce through the coordinator, the optimizer, the state's digests). Figures (``big_`` names):

* ``big_params``, ``big_steps``, ``big_ranks`` — the workload;
* ``big_record_bytes`` and ``big_record_bytes_per_step`` — the recording; ``big_record_bytes_quarter``
  the same run cut to a quarter of the steps, recorded too, and ``big_bytes_growth`` their ratio
  (4.0 would be linear in the steps); ``big_bytes_fraction`` the recording over parameters x 4 bytes x
  steps (target <= 0.10);
* ``big_record_overhead_ratio`` — recorded over unrecorded wall time;
* ``big_seek_p50_ms`` / ``big_seek_p95_ms`` — random seeks (target p95 <= 1 s), and
  ``big_rebuild_p95_ms``: a command that reads the tensors there (their values rebuilt by
  re-executing the ranks).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from timetravel.bench.torch_rewind import percentile, recorded_s, seeks_of, unrecorded_s

BIG_RANKS = 8
BIG_STEPS = 100
BIG_ARGUMENTS = "--width 912 --layers 1 --context 8 --batch 1 --bucket-mb 25"
BIG_QUICK_ARGUMENTS = "--width 96 --layers 1 --context 8 --batch 1 --bucket-mb 25"
BIG_QUICK_STEPS = 8
BIG_SEEKS = 20
BIG_REBUILDS = 5


def _arguments(quick: bool, steps: int) -> str:
    return f"{BIG_QUICK_ARGUMENTS if quick else BIG_ARGUMENTS} --steps {steps}"


def _parameters(path: Path) -> int:
    """The elements of rank 0's parameters in the recording's final state."""
    from timetravel.recording import RecordingReader

    with RecordingReader.open(path) as reader:
        final = reader.restore(reader.manifests()[-1])
    return int(sum(value.size for value in final.nodes["r0"]["params"].values()))


def run_big_bench(quick: bool = False) -> dict[str, Any]:
    from timetravel.torch.protocol.limits import SNAPSHOT_EVERY_EVENTS_TORCH

    steps = BIG_QUICK_STEPS if quick else BIG_STEPS
    interval = SNAPSHOT_EVERY_EVENTS_TORCH
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tt-bench-torch-big-") as directory:
        path = Path(directory) / "big.ttr"
        quarter_path = Path(directory) / "quarter.ttr"
        plain_s = unrecorded_s(_arguments(quick, steps), BIG_RANKS)
        record_s, _report = recorded_s(_arguments(quick, steps), path, interval, BIG_RANKS)
        recorded_s(_arguments(quick, max(steps // 4, 1)), quarter_path, interval, BIG_RANKS)
        record_bytes, quarter_bytes = path.stat().st_size, quarter_path.stat().st_size
        parameters = _parameters(path)
        seeks = seeks_of(
            path, 4 if quick else BIG_SEEKS, branch_too=False, rebuilds=1 if quick else BIG_REBUILDS
        )
    return {
        "big_workload": f"docs/examples/torch/tiny_gpt.py {_arguments(quick, steps)}, {BIG_RANKS} ranks, "
        f"{seeks['end_events']} events",
        "big_params": parameters,
        "big_steps": steps,
        "big_ranks": BIG_RANKS,
        "big_record_bytes": record_bytes,
        "big_record_bytes_per_step": record_bytes // steps,
        "big_record_bytes_quarter": quarter_bytes,
        "big_bytes_growth": round(record_bytes / quarter_bytes, 2),
        "big_bytes_fraction": round(record_bytes / (parameters * 4 * steps), 4),
        "big_record_overhead_ratio": round(record_s / plain_s, 3),
        "big_recorded_run_s": round(record_s, 1),
        "big_unrecorded_run_s": round(plain_s, 1),
        "big_seek_p50_ms": round(percentile(seeks["walls_ms"], 0.50), 1),
        "big_seek_p95_ms": round(percentile(seeks["walls_ms"], 0.95), 1),
        "big_rebuild_p95_ms": round(percentile(seeks["rebuild_walls_ms"], 0.95), 1),
        "big_seek_failures": len(seeks["failed"]),
        "big_bench_s": round(time.perf_counter() - started, 1),
    }


if __name__ == "__main__":
    print(json.dumps(run_big_bench(quick="--quick" in sys.argv), indent=1))
