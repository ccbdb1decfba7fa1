"""The store a rank's ``init_process_group`` gets (rank side, imports torch): every call goes to the World.

:class:`SimulatedStore` is a Python ``dist.Store``: torch's C++ (``PrefixStore``, which
``_get_default_store()`` returns) calls its methods, and so does the script. Each call is posted as a
``call`` to the World (``op`` ``store.<name>``) and waited for at once, so it happens at the rank's
logical time and the ``store`` node (:mod:`timetravel.torch.world.store`) orders it against the other ranks'
calls. A ``get`` of a key nobody set blocks until a rank sets it, or raises ``DistStoreError`` after the
store's timeout (logical time; torch's default 300 s, ``set_timeout`` changes it).

torch's ``PrefixStore`` cannot forward ``num_keys`` to a Python store (its C++ calls a pure virtual
function): ``num_keys`` works on this store directly, not through ``_get_default_store()``.
"""

from __future__ import annotations

import datetime
from typing import Any

import torch.distributed as dist

from timetravel.torch.rank import backend
from timetravel.torch.rank.errors import the_scripts

STORE_TIMEOUT_DEFAULT = datetime.timedelta(seconds=300)
"""torch's default store timeout (``dist.constants.default_pg_timeout`` is for collectives)."""


_LIVING: list[SimulatedStore] = []


def _bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _nanoseconds(timeout: datetime.timedelta) -> int:
    return int(timeout.total_seconds() * 1_000_000_000)


class SimulatedStore(dist.Store):
    """See the module docstring."""

    def __init__(self, timeout: datetime.timedelta = STORE_TIMEOUT_DEFAULT) -> None:
        super().__init__()
        self._timeout_ns = _nanoseconds(timeout)
        self._capturing: list[str] | None = None
        # torch's C++ (a PrefixStore) may hold the store alone, not the Python object its methods
        # live on: a store lives as long as the rank (a script makes a handful)
        _LIVING.append(self)
        self._maker = backend.Maker()

    def _call(self, op: str, timeout_ns: int | None = None, **arguments: Any) -> Any:
        self._maker.check(f"store.{op}")
        rank_channel = backend.channel()
        work_id = rank_channel.next_work_id()
        rank_channel.post(
            {
                "kind": "call",
                "op": f"store.{op}",
                "id": work_id,
                "args": arguments,
                "timeout_ns": self._timeout_ns if timeout_ns is None else timeout_ns,
            }
        )
        # a store call is answered by its own timeout (world/store.py), not by a collective's hang timeout
        reply = rank_channel.call({"kind": "wait", "works": [work_id], "store": True})
        outputs = reply["results"][str(work_id)]
        if "error" in outputs:
            raise the_scripts(dist.DistStoreError(outputs["error"]))
        return outputs["value"]

    def set(self, key: str, value: Any) -> None:
        self._call("set", key=key, value=_bytes(value))

    def get(self, key: str) -> bytes:
        return bytes(self._call("get", key=key))

    def add(self, key: str, amount: int) -> int:
        return int(self._call("add", key=key, amount=int(amount)))

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return bytes(self._call("compare_set", key=key, expected=_bytes(expected), desired=_bytes(desired)))

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        timeout_ns = None if timeout is None else _nanoseconds(timeout)
        self._call("wait", timeout_ns, keys=list(keys))

    def check(self, keys: list[str]) -> bool:
        if self._capturing is not None:  # a PrefixStore above told its full key (prefix_store_methods)
            self._capturing.extend(keys)
            return True
        return bool(self._call("check", keys=list(keys)))

    def delete_key(self, key: str) -> bool:
        return bool(self._call("delete_key", key=key))

    def num_keys(self) -> int:
        return int(self._call("num_keys"))

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self._timeout_ns = _nanoseconds(timeout)
        super().set_timeout(timeout)


class SimulatedTCPStore(SimulatedStore):
    """``dist.TCPStore`` in a rank: the same arguments, no socket; its keys are the World store's.

    torch's env:// and tcp:// rendezvous make one (``init_process_group``, ``init_device_mesh``), and so
    may the script itself (``store=dist.TCPStore(...)``): every rank's store is the one ``store`` node,
    as every rank's client reaches the one server on a real cluster."""

    def __init__(
        self,
        host_name: str,
        port: int,
        world_size: int | None = None,
        is_master: bool = False,
        timeout: datetime.timedelta = STORE_TIMEOUT_DEFAULT,
        wait_for_workers: bool = True,
        multi_tenant: bool = False,
        master_listen_fd: int | None = None,
        use_libuv: bool | None = None,
    ) -> None:
        super().__init__(timeout)
        self._host = str(host_name)
        self._port = int(port)
        self._use_libuv = True if use_libuv is None else bool(use_libuv)

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def libuvBackend(self) -> bool:  # torch's name
        return self._use_libuv


class SimulatedFileStore(SimulatedStore):
    """``dist.FileStore`` in a rank (file:// rendezvous, or the script's own): no file, the World's store."""

    def __init__(self, file_name: str, world_size: int = -1) -> None:
        super().__init__()
        self._path = str(file_name)

    @property
    def path(self) -> str:
        return self._path


def prefix_store_methods(patches: Any) -> None:
    """``num_keys`` and ``delete_key`` of a ``PrefixStore`` over a simulated store.

    torch's C++ ``PrefixStore`` forwards them to a virtual function a Python store cannot override
    ("Tried to call pure virtual function"): these ask the simulated store at the bottom instead,
    with the key as the prefixes make it (learned from the ``check`` the PrefixStore forwards)."""
    prefix_store = dist.PrefixStore
    real_num_keys, real_delete_key = prefix_store.num_keys, prefix_store.delete_key

    def num_keys(self: Any) -> int:
        bottom = self._underlying_non_prefix_store
        return bottom.num_keys() if isinstance(bottom, SimulatedStore) else real_num_keys(self)

    def delete_key(self: Any, key: str) -> bool:
        bottom = self._underlying_non_prefix_store
        if not isinstance(bottom, SimulatedStore):
            return bool(real_delete_key(self, key))
        bottom._capturing = []
        try:
            self.check([key])
            full = bottom._capturing[0]
        finally:
            bottom._capturing = None
        return bottom.delete_key(full)

    patches.replace(prefix_store, "num_keys", num_keys, aliases=False)
    patches.replace(prefix_store, "delete_key", delete_key, aliases=False)
