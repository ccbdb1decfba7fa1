"""Copy-on-write snapshots of a World: node-granular sharing, page dedup, exact restore.

``SnapshotStore.take(world, since)`` (or ``changes=``: :class:`Changes`, gathered as the kernel
flushes its batches) records a snapshot whose ``state_hash`` equals
``world.state_hash()``; ``restore(snapshot)`` gives a new World with that hash. ``dirty_nodes``
turns the kernel's chain batches into the set of nodes that may have changed. The float page
codec used by recordings lives in :mod:`timetravel.snapshot.codec`.
"""

from timetravel.snapshot.changes import Changes, SnapshotError, dirty_nodes
from timetravel.snapshot.restore import decode_blob, restore
from timetravel.snapshot.store import SNAPSHOT_BYTES_MAX_DEFAULT, Snapshot, SnapshotStore

__all__ = [
    "SNAPSHOT_BYTES_MAX_DEFAULT",
    "Changes",
    "Snapshot",
    "SnapshotError",
    "SnapshotStore",
    "decode_blob",
    "dirty_nodes",
    "restore",
]
