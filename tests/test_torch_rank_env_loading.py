"""DataLoader workers run in the rank and deliver what real worker processes deliver; compile is eager."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from timetravel.torch.rank.env.loading import install_compile, install_dataloader


class Augmented(Dataset[Any]):
    """Every item draws from the three generators a worker seeds, and names the worker."""

    def __len__(self) -> int:
        return 23

    def __getitem__(self, index: int) -> dict[str, Any]:
        info = get_worker_info()
        return {
            "index": index,
            "worker": -1 if info is None else info.id,
            "torch": torch.rand(2),
            "python": random.random(),
            "numpy": np.random.rand(),
        }


class Counting(IterableDataset[int]):
    def __iter__(self) -> Any:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(worker, 12, workers))


INIT_CALLS: list[int] = []


def record_init(worker_id: int) -> None:
    INIT_CALLS.append(worker_id)
    np.random.seed(np.random.get_state()[1][0] + 7 * worker_id)  # a common worker_init_fn pattern


def batches(**loader_options: Any) -> list[list[Any]]:
    """Two epochs from a shuffled DataLoader, as plain data for comparison."""
    torch.manual_seed(5)
    loader = DataLoader(Augmented(), batch_size=4, shuffle=True, worker_init_fn=record_init, **loader_options)
    epochs = []
    for _ in range(2):
        epochs.append(
            [
                (
                    batch["index"].tolist(),
                    batch["worker"].tolist(),
                    batch["torch"].tolist(),
                    batch["python"].tolist(),
                    batch["numpy"].tolist(),
                )
                for batch in loader
            ]
        )
    return epochs


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("persistent_workers", [False, True])
def test_virtual_workers_deliver_what_real_worker_processes_deliver(persistent_workers: bool) -> None:
    real = batches(num_workers=3, persistent_workers=persistent_workers)
    INIT_CALLS.clear()
    with install_dataloader():
        virtual = batches(num_workers=3, persistent_workers=persistent_workers)
    assert virtual == real
    assert ([0, 1, 2] if persistent_workers else [0, 1, 2, 0, 1, 2]) == INIT_CALLS
    assert [batch[1][0] for batch in virtual[0]] == [0, 1, 2, 0, 1, 2]


def test_virtual_workers_leave_the_rank_generators_as_real_workers_do() -> None:
    def after_an_epoch(**options: Any) -> tuple[float, float, float]:
        torch.manual_seed(5)
        random.seed(5)
        np.random.seed(5)
        list(DataLoader(Augmented(), batch_size=4, **options))
        return torch.rand(1).item(), random.random(), float(np.random.rand())

    real = after_an_epoch(num_workers=2)
    with install_dataloader():
        assert after_an_epoch(num_workers=2) == real


def test_an_iterable_dataset_keeps_real_worker_processes() -> None:
    with install_dataloader():
        items = [batch.tolist() for batch in DataLoader(Counting(), batch_size=2, num_workers=2)]
    assert sorted(item for batch in items for item in batch) == list(range(12))


def test_compile_runs_eager_unless_inductor_is_asked() -> None:
    seen: list[str] = []
    real_compile = torch.compile

    with install_compile("eager"):
        function = torch.compile(lambda x: torch.sin(x) * 2, mode="max-autotune")
        assert function(torch.zeros(2)).tolist() == [0.0, 0.0]
        module = torch.nn.Linear(2, 1)
        module.compile()
        module(torch.ones(1, 2))
        seen.append(torch.compile.__name__)
    assert torch.compile is real_compile
    with install_compile("inductor"):
        assert torch.compile is real_compile
    with pytest.raises(ValueError, match="compile mode"):
        install_compile("tvm")
    assert seen == ["compile"]
