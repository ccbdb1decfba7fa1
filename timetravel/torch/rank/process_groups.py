"""How a script's process groups reach the simulator, however it asks (rank side, imports torch).

torch's own ``init_process_group``, ``new_group`` and ``init_device_mesh`` run as they are, so every
check and every message is torch's (a second ``init_process_group``, ``Cannot specify both init_method
and store``, a malformed ``"cpu:gloo,cuda:nccl"``, a ``device_id`` out of range ...). Three doors under
them are bent onto the World:

* **stores** — ``TCPStore`` and ``FileStore``, the ones torch's ``env://``, ``tcp://`` and ``file://``
  rendezvous make and the script's own (``store=``), are simulated stores (:mod:`.store_client`): no
  socket and no file, every rank's keys in the World's ``store`` node;
* **backends** — every group is made by ``_new_process_group_helper``: for ``gloo``, ``nccl``, no backend
  and ``"device:backend"`` strings of those (:func:`lands`) it makes the simulator's group, with no
  backend options (``pg_options`` configure the backend it replaces); ``dist.get_backend()`` answers
  what the script asked. Other names (``mpi``, ``ucc``, ``fake``, unknown ones) get torch's own answer.
  A ``device_id`` is checked as torch checks it (``cpu`` or no index: torch's ``ValueError``) and binds
  nothing (a simulated group has no device);
* **timeouts** — a ``timeout=`` the script gives ``init_process_group`` or ``new_group`` is that
  group's hang timeout, sent with each of its waits (world/hangs.py); a group made without one has the
  run's ``hang_timeout``. ``nccl``'s default timeout is a CUDA build's (10 minutes), with no warning.
"""

from __future__ import annotations

import datetime
import functools
import importlib
import inspect
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d

from timetravel.torch.rank import backend
from timetravel.torch.rank.env.patching import Patches
from timetravel.torch.rank.errors import passes_through
from timetravel.torch.rank.store_client import SimulatedFileStore, SimulatedTCPStore, prefix_store_methods

LANDING_BACKENDS = ("undefined", "gloo", "nccl")
"""The backend names whose groups the simulator makes (alone, or per device as ``cpu:gloo,cuda:nccl``)."""
NCCL_TIMEOUT_DEFAULT = datetime.timedelta(minutes=10)
"""``torch.distributed.constants.default_pg_nccl_timeout`` in a CUDA build."""


def lands(requested: Any) -> bool:
    """Whether a group asked for with backend ``requested`` is the simulator's (see the docstring).
    ``nccl`` is only while torch.cuda serves devices: with ``--set cuda=off`` torch is a CPU-only host's,
    and a group asking for nccl gets that host's answer (torch's "Distributed package doesn't have NCCL
    built in"), as under real torchrun there."""
    import torch

    landing = LANDING_BACKENDS if torch.cuda.is_available() else ("undefined", "gloo")
    text = str(requested).lower()
    if ":" not in text:
        return text in landing
    pairs = [pair.split(":") for pair in text.split(",")]
    return all(len(pair) == 2 and pair[1] in landing[1:] for pair in pairs)


class ProcessGroupDoors:
    """The doors above, installed once in a rank; knows whether the group being made has a timeout of
    the script's (a stack: ``init_device_mesh`` calls ``init_process_group``)."""

    def __init__(self) -> None:
        self.explicit_timeouts: list[bool] = []

    def install(self) -> Patches:
        rendezvous = importlib.import_module("torch.distributed.rendezvous")  # the attribute is the function

        patches = Patches()
        for name, store in (("TCPStore", SimulatedTCPStore), ("FileStore", SimulatedFileStore)):
            for module in (dist, rendezvous):
                patches.replace(module, name, store, aliases=False)
        prefix_store_methods(patches)
        patches.replace(dist.constants, "default_pg_nccl_timeout", NCCL_TIMEOUT_DEFAULT, aliases=False)
        patches.replace(distributed_c10d, "default_pg_nccl_timeout", NCCL_TIMEOUT_DEFAULT, aliases=False)
        patches.wrap(distributed_c10d, "_new_process_group_helper", self._make_helper)
        for name in ("init_process_group", "new_group"):
            patches.wrap(distributed_c10d, name, self._noting_timeout)
            patches.replace(dist, name, getattr(distributed_c10d, name), aliases=False)
        if backend.BACKEND_NAME.upper() not in dist.Backend._plugins:
            dist.Backend.register_backend(backend.BACKEND_NAME, self._create_group, devices=["cpu", "cuda"])
        return patches

    def _create_group(self, store: Any, rank: int, size: int, timeout: Any) -> backend.SimulatedProcessGroup:
        """The creator torch calls for every simulated group (torch fills in a default timeout)."""
        explicit = bool(self.explicit_timeouts) and self.explicit_timeouts[-1]
        return backend.SimulatedProcessGroup(rank, size, timeout if explicit else None)

    def _noting_timeout(self, original: Any) -> Any:
        signature = inspect.signature(original)
        doors = self

        @functools.wraps(original)
        @passes_through
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)  # torch's own TypeError
            doors.explicit_timeouts.append(bound.arguments.get("timeout") is not None)
            try:
                return original(*args, **kwargs)
            finally:
                doors.explicit_timeouts.pop()

        return call

    def _make_helper(self, original: Any) -> Any:
        signature = inspect.signature(original)

        @functools.wraps(original)
        @passes_through
        def helper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            requested = str(bound.arguments.get("backend"))
            if not lands(requested):
                if "nccl" in requested.lower() and lands(requested.lower().replace("nccl", "gloo")):
                    # nccl without CUDA (cuda=off): torch's own refusal, before a gloo part connects
                    bound.arguments["backend"] = "nccl"
                    return original(*bound.args, **bound.kwargs)
                return original(*args, **kwargs)
            config = distributed_c10d.BackendConfig(dist.Backend(requested))  # torch's checks of the string
            device_id = bound.arguments.get("device_id")
            if device_id is not None and (device_id.index is None or device_id.type == "cpu"):
                return original(*args, **kwargs)  # torch refuses it, with its own message
            bound.arguments.update(backend=backend.BACKEND_NAME, device_id=None)
            if "backend_options" in bound.arguments:
                bound.arguments["backend_options"] = None
            group, store = original(*bound.args, **bound.kwargs)
            if group in distributed_c10d._world.pg_map:  # what the script asked for, as torch tells it
                registered_store = distributed_c10d._world.pg_map[group][1]
                distributed_c10d._world.pg_map[group] = (dist.Backend(requested), registered_store)
                distributed_c10d._world.pg_backend_config[group] = str(config)
            return group, store

        return helper
