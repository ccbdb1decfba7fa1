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

STORE_TIMEOUT_DEFAULT = datetime.timedelta(seconds=300)
"""torch's default store timeout (``dist.constants.default_pg_timeout`` is for collectives)."""


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
        reply = rank_channel.call({"kind": "wait", "works": [work_id]})
        outputs = reply["results"][str(work_id)]
        if "error" in outputs:
            raise dist.DistStoreError(outputs["error"])
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
        return bool(self._call("check", keys=list(keys)))

    def delete_key(self, key: str) -> bool:
        return bool(self._call("delete_key", key=key))

    def num_keys(self) -> int:
        return int(self._call("num_keys"))

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self._timeout_ns = _nanoseconds(timeout)
        super().set_timeout(timeout)
