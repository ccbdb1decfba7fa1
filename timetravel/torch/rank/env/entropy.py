"""Entropy inside a rank process: unseeded randomness comes from the world's seed, seeds set by the
script behave exactly as they do under torchrun.

``install_entropy(seed_bytes, rank=r)``:

* **OS entropy** — ``os.urandom``, ``os.getrandom`` and the ``random`` module's ``_urandom`` (which
  ``random.SystemRandom``, ``secrets`` and numpy's ``SeedSequence()`` draw from) read an
  :class:`EntropyStream`: BLAKE2b in counter mode keyed by (seed, rank). ``uuid.uuid4`` reads
  ``os.urandom``; ``uuid.uuid1`` uses the logical wall clock, the seeded ``random`` module and a
  node id from the stream (never the host's MAC address).
* **Default generators**, which a real process seeds from OS entropy at start-up, are seeded from
  (seed, rank): Python's global ``random``, numpy's legacy global ``RandomState`` and torch's
  default CPU generator (``torch.initial_seed()``). Each rank gets its own seeds, as each torchrun
  process gets its own entropy. ``random.Random()``/``random.seed()`` without a seed,
  ``np.random.seed()``, ``np.random.default_rng()``, ``torch.seed()`` and ``Generator.seed()``
  draw their seed from the stream.
* **Seeds the script sets** (``torch.manual_seed(s)``, ``random.seed(s)``, ``np.random.seed(s)``,
  ``torch.Generator().manual_seed(s)``, ``default_rng(s)``) are untouched: the same values as
  anywhere else.
* A forked child (an IterableDataset's worker, a script's own ``os.fork``) re-keys its stream with
  the parent's fork count, so children draw different but reproducible bytes. A checkpoint fork
  made by the runtime inside :func:`preserving_entropy_across_fork` continues the stream instead.

Not covered (documented leaks): ``ssl.RAND_bytes`` and C extensions reading ``/dev/urandom``
themselves, and ``PYTHONHASHSEED`` (set iteration order), which the process start fixes or
``check-determinism`` finds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import sys
import uuid
from collections.abc import Iterator
from typing import Any

from timetravel.torch.rank.env.patching import Installation, Patches
from timetravel.torch.rank.errors import the_scripts

BLOCK_BYTES = 64
KEY_BYTES = 32


def derive(seed_bytes: bytes, *parts: str | int) -> bytes:
    """A 32-byte key from the world's seed and labels (``derive(seed, "torch", 3)``)."""
    digest = hashlib.blake2b(digest_size=KEY_BYTES, person=b"timetravel.rank")
    digest.update(len(seed_bytes).to_bytes(8, "little") + seed_bytes)
    for part in parts:
        encoded = str(part).encode()
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.digest()


def derive_int(seed_bytes: bytes, bits: int, *parts: str | int) -> int:
    return int.from_bytes(derive(seed_bytes, *parts), "little") % (1 << bits)


class EntropyStream:
    """Reproducible bytes: BLAKE2b(key, block counter), read in order; state is the key and a counter."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.block = 0
        self.fork_count = 0
        self._buffer = b""

    def read(self, size: int) -> bytes:
        if size < 0:
            raise the_scripts(ValueError("negative argument not allowed"))
        while len(self._buffer) < size:
            digest = hashlib.blake2b(self.block.to_bytes(8, "little"), key=self.key, digest_size=BLOCK_BYTES)
            self._buffer += digest.digest()
            self.block += 1
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def read_int(self, bits: int) -> int:
        return int.from_bytes(self.read((bits + 7) // 8), "little") % (1 << bits)

    def rekey_for_child(self) -> None:
        """In a forked child: a stream of its own, a function of the parent's stream and fork count."""
        self.key = derive(self.key, "fork", self.fork_count)
        self.block = 0
        self.fork_count = 0
        self._buffer = b""


_active: list[EntropyStream] = []
"""The installed stream (at most one); fork handlers are registered once and act on it."""
_fork_handlers_registered = False
_checkpoint_forks = [0]
"""Depth of :func:`preserving_entropy_across_fork` blocks: forks inside one are checkpoints."""


def _before_fork() -> None:
    if _active and not _checkpoint_forks[0]:
        _active[-1].fork_count += 1


def _after_fork_in_child() -> None:
    if _active and not _checkpoint_forks[0]:
        _active[-1].rekey_for_child()


@contextlib.contextmanager
def preserving_entropy_across_fork() -> Iterator[None]:
    """Forks inside this block are checkpoints: the child continues the parent's stream unchanged.

    A checkpoint (``os.fork()`` at a step boundary, resumed later) must draw exactly the bytes the
    original rank would have drawn, so it neither re-keys nor counts as a fork. Both processes
    leave the block after the fork, each restoring its own depth.
    """
    _checkpoint_forks[0] += 1
    try:
        yield
    finally:
        _checkpoint_forks[0] -= 1


def install_entropy(seed_bytes: bytes, *, rank: int) -> Installation:
    """Serve every unseeded entropy source of this rank from (``seed_bytes``, ``rank``); see the module doc."""
    global _fork_handlers_registered
    if not isinstance(seed_bytes, bytes):
        raise TypeError(f"seed_bytes must be bytes, not {type(seed_bytes).__name__}")
    torch_present = "torch" in sys.modules or _torch_importable()
    if (
        torch_present
    ):  # import first: a module's first import may draw entropy, which must not shift the stream
        import torch.cuda  # noqa: F401
    patches = Patches()
    # Seed the default generators first: a library's first use may draw OS entropy (numpy builds a
    # SeedSequence once), which must come from the host, not shift the rank's stream.
    _seed_numpy(patches, derive_int(seed_bytes, 32, "numpy", rank))
    stream = EntropyStream(derive(seed_bytes, "urandom", rank))
    if torch_present:
        _seed_torch(patches, stream, derive_int(seed_bytes, 63, "torch", rank))
    _active.append(stream)
    patches.on_undo(lambda: _active.remove(stream))
    if not _fork_handlers_registered:
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
        _fork_handlers_registered = True

    def urandom(size: int, *flags: Any) -> bytes:
        return stream.read(size)

    patches.replace(os, "urandom", urandom)
    if hasattr(os, "getrandom"):
        patches.replace(os, "getrandom", urandom)
    patches.replace(random, "_urandom", urandom)
    _patch_random(patches, stream, derive_int(seed_bytes, 64, "random", rank))
    _patch_uuid(patches, stream)
    patches.rebind_aliases(skip_prefixes=("timetravel.",))
    return Installation("entropy", patches, stream)


def _torch_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _patch_random(patches: Patches, stream: EntropyStream, global_seed: int) -> None:
    real_seed = random.Random.seed

    def seed(self: random.Random, a: Any = None, version: int = 2) -> None:
        if a is None:
            a = stream.read_int(64)
        real_seed(self, a, version)

    patches.replace(random.Random, "seed", seed)
    instance: random.Random = random._inst
    previous_state = instance.getstate()
    patches.on_undo(lambda: instance.setstate(previous_state))
    patches.replace(random, "seed", instance.seed)
    instance.seed(global_seed)


def _patch_uuid(patches: Patches, stream: EntropyStream) -> None:
    node = stream.read_int(48) | (1 << 40)  # a random node id has the multicast bit set (RFC 4122)
    patches.replace(uuid, "_generate_time_safe", None)  # libuuid reads the host clock and MAC
    patches.replace(uuid, "getnode", lambda: node)
    patches.replace(uuid, "_node", node)
    patches.replace(uuid, "_last_timestamp", None)


def _seed_numpy(patches: Patches, global_seed: int) -> None:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency of timetravel
        return
    previous_state = np.random.get_state()
    patches.on_undo(lambda: np.random.set_state(previous_state))
    np.random.seed(global_seed)


def _seed_torch(patches: Patches, stream: EntropyStream, global_seed: int) -> None:
    import torch
    import torch.cuda

    generator = torch.default_generator
    previous_state = generator.get_state()
    previous_seed = generator.initial_seed()

    def restore() -> None:
        generator.manual_seed(previous_seed)
        generator.set_state(previous_state)

    patches.on_undo(restore)
    generator.manual_seed(global_seed)

    def generator_seed(self: Any) -> int:
        value = stream.read_int(63)
        self.manual_seed(value)
        return value

    patches.replace_type_attribute(torch._C.Generator, "seed", generator_seed)

    def seed() -> int:
        value = generator_seed(torch.default_generator)
        torch.cuda.manual_seed_all(value)
        return value

    patches.replace(torch, "seed", seed)
    if "torch.random" in sys.modules:
        patches.replace(sys.modules["torch.random"], "seed", seed)
