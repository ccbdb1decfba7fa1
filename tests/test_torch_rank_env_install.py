"""install_all: the whole rank environment, and a script under it that gives the same bits every run."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
import timeit
from pathlib import Path

import torch

from timetravel.torch.rank.env import RankClock, install_all, preload

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent

RANK_SCRIPT = '''
"""A GPU-style training script under the rank environment; prints everything it observed."""
import datetime, json, os, random, sys, time, uuid
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from timetravel.torch import metric
from timetravel.torch.rank.env import RankClock, install_all, preload

seed = sys.argv[1].encode()
clock = RankClock()
records = []
install_all(clock, seed_bytes=seed, rank=1, local_rank=1, local_world_size=2,
            metrics_sink=lambda name, value, step: records.append([name, value.hex(), step]))


class Noisy(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, index):
        x = torch.randn(8) + random.random() + float(np.random.rand())
        return x, x.sum(dim=0, keepdim=True).sin()


torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "1")))
device = torch.device("cuda", torch.cuda.current_device())
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.1), torch.nn.GELU(),
                            torch.nn.Linear(32, 1)).to(device)  # unseeded init: the rank's derived seed
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
scaler = torch.amp.GradScaler("cuda")
loader = DataLoader(Noisy(), batch_size=8, shuffle=True, num_workers=2)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
observed = {"losses": [], "step_seconds": [], "event_ms": []}
for epoch in range(2):
    for step, (inputs, targets) in enumerate(loader):
        t0 = time.perf_counter()
        start.record()
        inputs, targets = inputs.to(device, non_blocking=True), targets.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        clock.advance(1_250_000 + 1000 * step)  # the runtime charges compute; here by hand
        time.sleep(0.01)
        end.record()
        torch.cuda.synchronize()
        observed["losses"].append(loss.item().hex())
        observed["step_seconds"].append((time.perf_counter() - t0).hex())
        observed["event_ms"].append(start.elapsed_time(end).hex())
        metric("loss", loss, step=step)
observed.update(
    time=time.time().hex(),
    now=datetime.datetime.now().isoformat(),
    uuid4=str(uuid.uuid4()),
    urandom=os.urandom(8).hex(),
    random=random.random().hex(),
    numpy=float(np.random.rand()).hex(),
    torch_initial_seed=torch.initial_seed(),
    parameters=[p.detach().double().sum().item().hex() for p in model.parameters()],
    metrics=records,
)
print(json.dumps(observed, sort_keys=True))
'''


def run_rank_script(tmp_path: Path, seed: str, hash_seed: str) -> dict[str, object]:
    script = tmp_path / "rank_script.py"
    script.write_text(RANK_SCRIPT)
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPOSITORY_ROOT),
        "PYTHONHASHSEED": hash_seed,
        "LOCAL_RANK": "1",
    }
    result = subprocess.run(
        [sys.executable, str(script), seed],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_script_under_install_all_gives_the_same_bits_with_any_hash_seed(tmp_path: Path) -> None:
    first = run_rank_script(tmp_path, "seed-1", hash_seed="1")
    second = run_rank_script(tmp_path, "seed-1", hash_seed="2")
    assert second == first
    assert len(first["losses"]) == 10  # type: ignore[arg-type]
    # logical time is the compute charged plus the sleeps, nothing else: 2 epochs of 5 steps
    step_ns = [1_250_000 + 1000 * step + 10_000_000 for step in range(5)]
    elapsed = datetime.timedelta(microseconds=2 * sum(step_ns) // 1000)
    assert first["now"] == (datetime.datetime(2000, 1, 1) + elapsed).isoformat()
    assert first["event_ms"][0] == (step_ns[0] / 1e6).hex()  # type: ignore[index]
    assert first["metrics"][0][0] == "loss"  # type: ignore[index]


def test_install_all_and_uninstall_in_process() -> None:
    preload(freeze=False)  # what a zygote calls before forking ranks (without freezing pytest's heap)
    clock = RankClock()
    wall_before = time.time()
    with install_all(clock, seed_bytes=b"s", rank=0, local_rank=0, local_world_size=2) as environment:
        assert torch.cuda.device_count() == 2
        assert torch.get_num_threads() == 1
        assert torch.are_deterministic_algorithms_enabled()
        assert time.monotonic_ns() == 0
        assert timeit.default_timer() == 0.0  # bound before installing: rebound by the shared scan
        assert [installation.name for installation in environment.installations] == [
            "torch_settings",
            "time",
            "entropy",
            "identity",
            "cuda",
            "dataloader",
            "compile",
        ]
    assert not torch.cuda.is_available()
    assert time.time() >= wall_before
    assert not torch.are_deterministic_algorithms_enabled()
