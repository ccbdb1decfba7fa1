"""``timetravel bench snapshot``: what recording costs, and how fast a recording seeks.

* ``record_overhead_ratio``: dp_training preset=demo recorded / not recorded (target <= 1.15);
  None while that scenario is not installed (``notes`` says so). ``record_overhead_ratio_collective``:
  the same demo at ``fabric_level=collective`` (issue 18 asks for both levels: far fewer
  events for the same simulated time, so the same snapshots weigh more). ``record_overhead_ratio_gossip``:
  the same on gossip with 1024 nodes, where every node changes between two snapshots (the worst
  case for copy-on-write). Each ratio is the best of 3 runs a side, plain and recorded runs
  alternating after one unmeasured round (bench/timing.py: alternating_best).
* ``cow_1pct_vs_full_ratio``: the cost of one snapshot of a 1024-node gossip world mid-spread
  (thousands of pending events) when 1% of the nodes ran since the previous snapshot, over the
  cost when every node ran (target <= 0.05); best of 7 each.
* ``float_bytes_ratio``: bytes a recording stores per snapshot for the float pages of one rank
  (dp_training's weights and optimizer state, the rank holding the most float bytes) over their
  raw bytes (target <= 0.85), at the default interval. ``float_bytes_ratio_synthetic``: the same
  on a stand-in rank (1 MiB of float32 weights and two Adam moments, one Adam step between two
  snapshots), measured whether or not dp_training exists.
* ``seek_p50_ms`` / ``seek_p95_ms``: 200 ``goto`` to uniformly random times in a gossip
  recording of >= 1,000,000 events over 1024 nodes (target p95 <= 100 ms); ``back_p95_ms``:
  ``back(1)`` from 200 random events.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import zstandard

from timetravel.bench.timing import alternating_best, percentile, timed
from timetravel.explore.session import Session
from timetravel.recording import RecordingReader, record_run
from timetravel.recording.format import FrameType
from timetravel.recording.recorder import SNAPSHOT_EVERY_EVENTS_DEFAULT
from timetravel.recording.writer import ZSTD_LEVEL_DEFAULT
from timetravel.scenarios import UnknownScenarioError, get_scenario
from timetravel.sim import Context, Event, Param, Scenario, Simulation, World
from timetravel.sim.encoding import EXT_ARRAY_DIGEST
from timetravel.sim.runner import build_world, run_report
from timetravel.snapshot import SnapshotStore
from timetravel.snapshot.codec import FLOAT_DTYPE_NAMES

SEEK_NODES = 1024
SEEK_RUMORS = 350
"""1024 nodes and 350 rumors: just over 1,000,000 events."""
SEEKS = 200
OVERHEAD_RUMORS = 100
COW_RUMORS = 1000
COW_WARMUP_EVENTS = 200_000
COW_REPEATS = 7
SYNTHETIC_WEIGHTS = 262_144
SYNTHETIC_STEPS = 12


def run_bench(quick: bool = False) -> dict[str, Any]:
    """Measure and return the snapshot figures (``quick``: small workloads, for smoke tests)."""
    notes: list[str] = ["measured on a shared 2-core machine: wall-clock figures are noisy"]
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="timetravel-bench-") as folder:
        directory = Path(folder)
        figures["record_overhead_ratio"] = _dp_training_overhead(directory, quick, notes)
        figures["record_overhead_ratio_collective"] = _dp_training_overhead(
            directory, quick, notes, fabric_level="collective"
        )
        figures["record_overhead_ratio_gossip"] = _gossip_overhead(directory, quick)
        figures["cow_1pct_vs_full_ratio"] = _cow_ratio(quick)
        figures["float_bytes_ratio"] = _dp_training_float_ratio(directory, quick, notes)
        figures["float_bytes_ratio_synthetic"] = _synthetic_float_ratio(directory, quick)
        figures.update(_seek_figures(directory, quick))
    figures["notes"] = notes
    return {"bench": "snapshot", "figures": figures}


# -- recording overhead -------------------------------------------------------------------------


def _overhead(scenario: Scenario, config: dict[str, Any], path: Path) -> float:
    plain, recorded = alternating_best(
        lambda: run_report(scenario, config, 1), lambda: record_run(scenario, config, 1, path, force=True)
    )
    return round(recorded / plain, 3)


def _gossip_overhead(directory: Path, quick: bool) -> float:
    scenario = get_scenario("gossip")
    nodes, rumors = (256, 20) if quick else (SEEK_NODES, OVERHEAD_RUMORS)
    config = scenario.resolve_config({"nodes": nodes, "rumors": rumors})
    return _overhead(scenario, config, directory / "overhead-gossip.ttr")


def _dp_training(notes: list[str], **settings: Any) -> tuple[Scenario, dict[str, Any]] | None:
    try:
        scenario = get_scenario("dp_training")
    except UnknownScenarioError:
        notes.append("dp_training is not installed yet: record_overhead_ratio and float_bytes_ratio are null")
        return None
    return scenario, scenario.resolve_config({"preset": "demo", **settings})


def _dp_training_overhead(directory: Path, quick: bool, notes: list[str], **settings: Any) -> float | None:
    found = _dp_training(notes, **settings)
    if found is None:
        return None
    scenario, config = found
    return _overhead(scenario, config, directory / "overhead-dp.ttr")


# -- copy-on-write ------------------------------------------------------------------------------


def _cow_ratio(quick: bool) -> float:
    scenario = get_scenario("gossip")
    config = scenario.resolve_config({"nodes": SEEK_NODES, "rumors": COW_RUMORS})
    world = build_world(scenario, config, 1)
    batches: list[list[Event]] = []
    simulation = Simulation(scenario, world, on_chain_batch=lambda _f, events, _d: batches.append(events))
    simulation.run(max_events=COW_WARMUP_EVENTS // (10 if quick else 1))
    store = SnapshotStore(bytes_max=0)
    store.take(world)
    names = list(world.nodes)[:SEEK_NODES]

    def snapshot_after(dirty: list[str]) -> float:
        for name in dirty:
            world.schedule(world.t_ns, name, "rumor", [COW_RUMORS - 1, 0])
        batches.clear()
        simulation.run(max_events=len(dirty))
        started = time.perf_counter()
        store.take(world, [*batches, world.chain_batch])
        return time.perf_counter() - started

    one_percent = names[:: len(names) // (SEEK_NODES // 100)][: SEEK_NODES // 100]
    repeats = 3 if quick else COW_REPEATS
    cost_small = min(snapshot_after(one_percent) for _ in range(repeats))
    cost_full = min(snapshot_after(names) for _ in range(repeats))
    return round(cost_small / cost_full, 4)


# -- float pages ----------------------------------------------------------------------------------


def _adam_step(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step = state["step"] + 1
    state["step"] = step
    weights, first, second = state["weights"], state["m"], state["v"]
    gradient = (np.sin(weights * np.float32(3.0) + np.float32(step)) * np.float32(1e-2)).astype(np.float32)
    first *= np.float32(0.9)
    first += np.float32(0.1) * gradient
    second *= np.float32(0.999)
    second += np.float32(0.001) * gradient * gradient
    weights -= np.float32(1e-4) * first / (np.sqrt(second) + np.float32(1e-8))
    ctx.timer(1_000_000, "step")


def _adam_build(config: dict[str, Any], seed: int) -> World:
    world = World("bench.adam", config, seed)
    generator = np.random.default_rng(seed)
    weights = generator.standard_normal(config["weights"]).astype(np.float32) * np.float32(0.05)
    zeros = np.zeros_like(weights)
    world.add_node("rank0", "rank", {"weights": weights, "m": zeros.copy(), "v": zeros.copy(), "step": 0})
    world.schedule(0, "rank0", "step")
    return world


ADAM_SCENARIO = Scenario(
    name="bench.adam",
    summary="one rank taking Adam steps on 1 MiB of float32 weights (the float page codec's stand-in)",
    params=(Param("weights", "int", SYNTHETIC_WEIGHTS, "float32 weights"),),
    build=_adam_build,
    handlers={"rank": {"step": _adam_step}},
)


def _node_float_pages(
    reader: RecordingReader, manifest: dict[str, Any], node: str
) -> list[tuple[bytes, int]]:
    """(page digest, raw bytes) of every float page of ``node`` in a manifest."""
    node_digest = dict((str(name), digest) for name, digest in manifest["nodes"])[node]
    arrays: list[bytes] = []

    def hook(code: int, data: bytes) -> Any:
        if code == EXT_ARRAY_DIGEST:
            arrays.append(data)
        return None

    msgpack.unpackb(reader.value_bytes(node_digest), ext_hook=hook, raw=False)
    pages: list[tuple[bytes, int]] = []
    for array_digest in arrays:
        dtype, _shape, page_digests = reader.array_header(array_digest)
        if dtype in FLOAT_DTYPE_NAMES:
            pages.extend((page, len(reader.page(page))) for page in page_digests)
    return pages


def float_bytes_ratio(path: Path, node: str | None = None) -> float:
    """Stored bytes (zstd at the recording's level) of the float pages a snapshot adds for one
    node, over their raw bytes, averaged over the snapshots after the first."""
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL_DEFAULT)
    with RecordingReader.open(path) as reader:
        payloads: dict[bytes, bytes] = {}
        for offset, kind in reader.catalog.frames:
            if kind == FrameType.BLOBS:
                for entry in reader.read_frame(offset)[1]["blobs"]:
                    payloads[entry[0]] = entry[5]
        manifests = [reader.manifest(info) for info in reader.manifests() if not info.final]
        if node is None:
            node = max(
                (str(name) for name, _digest in manifests[-1]["nodes"]),
                key=lambda name: sum(size for _page, size in _node_float_pages(reader, manifests[-1], name)),
            )
        stored = raw = 0
        for manifest in manifests[1:]:
            for page, size in _node_float_pages(reader, manifest, node):
                raw += size
                stored += len(compressor.compress(payloads[page])) if page in payloads else 0
    return round(stored / raw, 3) if raw else float("nan")


def _synthetic_float_ratio(directory: Path, quick: bool) -> float:
    path = directory / "adam.ttr"
    config = ADAM_SCENARIO.resolve_config({"weights": SYNTHETIC_WEIGHTS // (8 if quick else 1)})
    record_run(ADAM_SCENARIO, config, 1, path, snapshot_every_events=64, max_events=64 * SYNTHETIC_STEPS)
    return float_bytes_ratio(path, "rank0")


def _dp_training_float_ratio(directory: Path, quick: bool, notes: list[str]) -> float | None:
    found = _dp_training([])
    if found is None:
        return None
    scenario, config = found
    path = directory / "float-dp.ttr"
    record_run(scenario, config, 1, path, snapshot_every_events=SNAPSHOT_EVERY_EVENTS_DEFAULT)
    return float_bytes_ratio(path)


# -- seeking ------------------------------------------------------------------------------------


def _seek_figures(directory: Path, quick: bool) -> dict[str, Any]:
    scenario = get_scenario("gossip")
    nodes, rumors, seeks = (256, 40, 40) if quick else (SEEK_NODES, SEEK_RUMORS, SEEKS)
    config = scenario.resolve_config({"nodes": nodes, "rumors": rumors})
    path = directory / "seek-gossip.ttr"
    record_s, (report, _world) = timed(lambda: record_run(scenario, config, 1, path))
    rng = random.Random(1)
    open_s, session = timed(lambda: Session.open(path))
    with session:
        end = session.end
        seek_ms = []
        for _ in range(seeks):
            target = rng.randrange(0, end.t_ns)
            started = time.perf_counter()
            session.goto(target)
            seek_ms.append((time.perf_counter() - started) * 1000)
        back_ms = []
        for _ in range(seeks):
            session.goto_event(rng.randrange(1, end.events))
            started = time.perf_counter()
            session.back(1)
            back_ms.append((time.perf_counter() - started) * 1000)
    return {
        "seek_recording_events": report["events"],
        "seek_recording_nodes": nodes,
        "seek_recording_bytes": path.stat().st_size,
        "seek_recording_snapshots": report["recording"]["snapshots"],
        "seek_recording_wall_s": round(record_s, 2),
        "seek_open_ms": round(open_s * 1000, 1),
        "seek_p50_ms": round(statistics.median(seek_ms), 1),
        "seek_p95_ms": round(percentile(seek_ms, 0.95), 1),
        "back_p50_ms": round(statistics.median(back_ms), 1),
        "back_p95_ms": round(percentile(back_ms, 0.95), 1),
    }
