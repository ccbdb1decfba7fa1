"""DataLoader workers and torch.compile inside a rank.

**DataLoader(num_workers=K)** over a map-style dataset runs its K workers *in the rank process*,
as virtual workers that reproduce what K real worker processes deliver, batch for batch:

* the same seeds — ``base_seed`` drawn from ``loader.generator`` (or the rank's default generator)
  when the iterator is made, exactly as torch draws it; worker ``w`` starts with ``random``,
  torch's default generator and numpy's legacy generator seeded as ``_worker_loop`` seeds them
  (``base_seed + w``; numpy from ``_generate_state``), then ``worker_init_fn(w)``;
* the same assignment — torch hands the batches of a map-style dataset to its workers round-robin
  (batch ``i`` to worker ``i % K``) and delivers them in order; each virtual worker keeps its own
  random states between its batches (swapped in around each fetch) and
  ``get_worker_info()`` answers as inside that worker;
* ``persistent_workers=True`` keeps the workers' states across epochs; otherwise every epoch
  starts fresh workers from a new ``base_seed``, as torch does.

Why not real processes: a rank is a process the simulator may fork as a checkpoint (the next
issue's rewind), and worker processes would not be part of that copy; the farm runs ranks under
daemon processes, which multiprocessing forbids to have children; and K processes per rank on a
laptop-sized machine cost more than the fetches. Differences from real workers (documented):
the workers share the dataset object (a real worker has its own copy, so state a worker writes
into the dataset is seen by the other virtual workers); ``worker_init_fn`` runs in the rank;
``timeout``, ``prefetch_factor``, ``pin_memory`` and ``multiprocessing_context`` have no effect.
An **IterableDataset** with workers keeps torch's real worker processes (forked from the rank,
each seeded as above, its clock and entropy those of the rank at the fork): its batch order
depends on when each worker runs dry, which only the real loader models exactly.

**torch.compile** runs with ``backend="eager"`` (Dynamo traces, no code generation: the same
maths on CPU, start-up in milliseconds) unless ``install_compile("inductor")``; the
``inductor`` and ``cudagraphs`` backends are mapped, other backends (``aot_eager``, a callable)
run as asked. ``mode=`` and ``options=``, which only inductor reads, are dropped under eager.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Iterator
from typing import Any

from timetravel.torch.rank.env.patching import Installation, Patches

COMPILE_MODES = ("eager", "inductor")
MAPPED_BACKENDS = ("inductor", "cudagraphs")


class _WorkerState:
    """One virtual worker: its random states, its fetcher, its WorkerInfo."""

    def __init__(
        self, python_state: Any, torch_state: Any, numpy_state: Any, info: Any, fetcher: Any
    ) -> None:
        self.python_state = python_state
        self.torch_state = torch_state
        self.numpy_state = numpy_state
        self.info = info
        self.fetcher = fetcher


def _random_states() -> tuple[Any, Any, Any]:
    """Python's, torch's default and numpy's legacy random states (what a worker process owns)."""
    import numpy as np
    import torch

    return random.getstate(), torch.get_rng_state(), np.random.get_state()


def _set_random_states(python_state: Any, torch_state: Any, numpy_state: Any) -> None:
    import numpy as np
    import torch

    random.setstate(python_state)
    torch.set_rng_state(torch_state)
    np.random.set_state(numpy_state)


@contextlib.contextmanager
def _rank_states_kept() -> Iterator[None]:
    """The rank's own random states are back after a worker ran (a worker is another process)."""
    states = _random_states()
    try:
        yield
    finally:
        _set_random_states(*states)


@contextlib.contextmanager
def _worker_info_set(info: Any) -> Iterator[None]:
    """``get_worker_info()`` answers ``info`` meanwhile, as inside that worker."""
    from torch.utils.data._utils import worker as worker_module

    previous_info = worker_module._worker_info
    worker_module._worker_info = info
    try:
        yield
    finally:
        worker_module._worker_info = previous_info


def _new_fetcher(iterator: Any) -> Any:
    """A fetcher of ``iterator``'s dataset, as a worker makes one (at its start and every epoch)."""
    from torch.utils.data import dataloader

    return dataloader._DatasetKind.create_fetcher(
        iterator._dataset_kind,
        iterator._dataset,
        iterator._auto_collation,
        iterator._collate_fn,
        iterator._drop_last,
    )


def _make_iterator_class() -> type:
    import numpy as np
    import torch
    from torch.utils.data import dataloader
    from torch.utils.data._utils import worker as worker_module

    class VirtualWorkersIterator(dataloader._BaseDataLoaderIter):
        """A map-style DataLoader's K workers, run in the rank process (see the module docstring)."""

        def __init__(self, loader: Any) -> None:
            super().__init__(loader)
            self._loader = loader
            self._workers: list[_WorkerState] = []
            self._batch_index = 0
            with _rank_states_kept():
                for worker_id in range(self._num_workers):
                    self._workers.append(self._start_worker(worker_id))

        def _start_worker(self, worker_id: int) -> _WorkerState:
            seed = int(self._base_seed) + worker_id
            random.seed(seed)
            torch.default_generator.manual_seed(seed)
            np.random.seed(worker_module._generate_state(self._base_seed, worker_id))
            info = worker_module.WorkerInfo(
                id=worker_id, num_workers=self._num_workers, seed=seed, dataset=self._dataset
            )
            with _worker_info_set(info):
                if self._loader.worker_init_fn is not None:
                    self._loader.worker_init_fn(worker_id)
                fetcher = _new_fetcher(self)
            return _WorkerState(*_random_states(), info, fetcher)

        def _next_data(self) -> Any:
            index = self._next_index()  # may raise StopIteration
            worker = self._workers[self._batch_index % self._num_workers]
            self._batch_index += 1
            with _rank_states_kept():
                _set_random_states(worker.python_state, worker.torch_state, worker.numpy_state)
                try:
                    with _worker_info_set(worker.info):
                        data = worker.fetcher.fetch(index)
                finally:
                    worker.python_state, worker.torch_state, worker.numpy_state = _random_states()
            return data

        def _reset(self, loader: Any, first_iter: bool = False) -> None:
            super()._reset(loader, first_iter)
            self._batch_index = 0  # torch restarts its round-robin cycle at worker 0 every epoch
            for worker in self._workers:  # persistent workers make a new fetcher per epoch
                worker.fetcher = _new_fetcher(self)

    return VirtualWorkersIterator


def install_dataloader() -> Installation:
    """Run a map-style DataLoader's workers in the rank (see the module docstring)."""
    from torch.utils.data import IterableDataset, dataloader

    iterator_class = _make_iterator_class()
    patches = Patches()

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def _get_iterator(self: Any) -> Any:
            if self.num_workers == 0 or isinstance(self.dataset, IterableDataset):
                return original(self)
            return iterator_class(self)

        return _get_iterator

    patches.wrap(dataloader.DataLoader, "_get_iterator", wrap)
    return Installation("dataloader", patches, iterator_class)


def install_compile(mode: str = "eager") -> Installation:
    """``torch.compile`` with ``backend="eager"`` unless ``mode == "inductor"`` (see the module docstring)."""
    import torch

    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}, not {mode!r}")
    patches = Patches()
    if mode == "eager":

        def wrap(original: Any) -> Any:
            @functools.wraps(original)
            def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
                backend = kwargs.get("backend", "inductor")
                if isinstance(backend, str) and backend in MAPPED_BACKENDS:
                    kwargs["backend"] = "eager"
                    kwargs.pop("mode", None)
                    kwargs.pop("options", None)
                return original(model, *args, **kwargs)

            return compile

        patches.wrap(torch, "compile", wrap)
        patches.rebind_aliases(skip_prefixes=("timetravel.",))
    return Installation("compile", patches, mode)
