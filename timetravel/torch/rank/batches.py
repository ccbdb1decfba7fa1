"""Which samples each optimizer step trained on: the DataLoader's sampler indices (rank side, torch).

A NaN that came in with the data is found at the collective it reached, on the rank that loaded it;
what the user then needs is *which samples* that rank's step read. Every DataLoader iterator draws
its batches' indices through ``_BaseDataLoaderIter._next_index`` (the sampler or batch sampler,
single-process, timetravel's virtual workers and torch's own worker processes alike) and hands the
batches out in that order (``in_order``, the default). So the wrapper here queues the indices each
``_next_index`` yields on its iterator, and each batch ``__next__`` returns takes the oldest: the
indices of the batch the script actually received, also when workers prefetch ahead.

Each returned batch posts one ``batch`` message — the optimizer step it belongs to (the one in
progress: the rank's completed steps + 1) and its indices, at most :data:`BATCH_INDICES_MAX` of
them (the rest counted in ``dropped``) — which the World keeps as plain data in
``nodes/rN/batch`` (:func:`timetravel.torch.world.state.on_batch`). Everything is deterministic: the
indices are the sampler's, which the rank's seeded generators drive, and the message goes out at
the rank's logical time like a metric. A batch a script loads for step N+1 *before* calling step
N's ``optimizer.step()`` (a prefetch of its own) is counted in step N. An IterableDataset has no
sampler indices (its sampler yields None): nothing is posted. A script without a DataLoader (one
that indexes its tensors itself, as docs/examples/torch/ddp_mlp.py does by default) posts nothing.
"""

from __future__ import annotations

import collections
import functools
from typing import Any

from timetravel.torch.protocol.limits import BATCH_INDICES_MAX
from timetravel.torch.rank.channel import Channel

PENDING_BATCHES_MAX = 256
"""Index batches queued on one iterator ahead of the batches it returned (workers' prefetch is a
few per worker); beyond it the oldest are forgotten rather than grow without bound."""
_QUEUE_ATTRIBUTE = "_timetravel_batch_indices"


def _plain_indices(index: Any) -> list[int] | None:
    """The sampler's yield as a list of ints (a batch sampler's list, or one index for
    ``batch_size=None``); None when it is not indices (an IterableDataset's None)."""
    items = index if isinstance(index, (list, tuple)) else [index]
    if hasattr(index, "tolist") and not isinstance(index, (list, tuple)):
        listed = index.tolist()
        items = listed if isinstance(listed, list) else [listed]
    plain = []
    for item in items:
        if isinstance(item, bool) or item is None:
            return None
        try:
            plain.append(int(item))
        except (TypeError, ValueError):
            return None
    return plain


def install_batch_indices(channel: Channel, step_in_progress: Any) -> None:
    """Report each DataLoader batch's sampler indices with the optimizer step it belongs to;
    ``step_in_progress()`` is that step's number (1 for the first)."""
    from torch.utils.data import dataloader

    iterator_class = dataloader._BaseDataLoaderIter
    original_next_index = iterator_class._next_index
    original_next = iterator_class.__next__

    @functools.wraps(original_next_index)
    def _next_index(self: Any) -> Any:
        index = original_next_index(self)
        queue = self.__dict__.get(_QUEUE_ATTRIBUTE)
        if queue is None:
            queue = self.__dict__[_QUEUE_ATTRIBUTE] = collections.deque(maxlen=PENDING_BATCHES_MAX)
        queue.append(_plain_indices(index))
        return index

    @functools.wraps(original_next)
    def __next__(self: Any) -> Any:
        batch = original_next(self)
        queue = self.__dict__.get(_QUEUE_ATTRIBUTE)
        indices = queue.popleft() if queue else None
        if indices is not None:
            channel.post(
                {
                    "kind": "batch",
                    "step": int(step_in_progress()),
                    "indices": indices[:BATCH_INDICES_MAX],
                    "dropped": max(len(indices) - BATCH_INDICES_MAX, 0),
                }
            )
        return batch

    iterator_class._next_index = _next_index  # type: ignore[method-assign]
    iterator_class.__next__ = __next__  # type: ignore[method-assign]
