"""The private working directory of one execution of a torch world (coordinator side; no torch here).

Ranks write checkpoints and logs under their working directory, and a script that resumes from
``latest.pt`` reads what an earlier run left there. Under time travel that would let a run read its own
future (a second run of a seed, or a branch, finding the first one's files), so every execution of a
torch world gets a PRIVATE directory, the ranks' ``cwd``: empty, or a copy of the directory the
``workdir`` setting names (``timetravel torchrun --workdir DIR``), copied when the run starts.

:class:`WorkingDirectory` also captures the directory's files as plain data (:data:`FilesManifest`,
sorted ``(relative path, sha256, mode, size)``) and restores them, so a fork checkpoint of the ranks can
carry the files as they were at its point, and each branch sees exactly those. Content lives once in a
:class:`BlobStore` (content-addressed, shared by every capture of a session); a capture hashes and
copies only files whose ``(size, mtime_ns, inode, mode)`` changed since they were last seen.

Rules, each checked (a violation is a :class:`WorkdirError`, one line naming the limit or the path):

* bounded: at most :data:`WORKDIR_FILES_MAX` entries and :data:`WORKDIR_BYTES_MAX` bytes of file content,
  directories at most :data:`WORKDIR_DEPTH_MAX` deep;
* symbolic links are never followed: they are captured, copied and restored as links (their target text is
  the content), so ``latest.pt -> step_100.pt`` survives, and a walk never leaves the directory through one;
* sockets, FIFOs and devices are neither copied nor captured (they hold no content a branch could see);
* names from a manifest are checked before anything is written: relative, no ``..``, ``.`` or empty part.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from typing import NamedTuple

from timetravel.sim.scenario import ConfigError

WORKDIR_FILES_MAX = 10_000
"""Entries (files, links, directories) one working directory may hold: a training run's checkpoints and
logs are tens of files; ten thousand is a dataset copied in by mistake, which should be read in place."""

WORKDIR_BYTES_MAX = 1 << 30
"""File content one working directory may hold (1 GiB): a few checkpoints of a model this simulator runs
on CPU. Every capture may keep a new copy of what changed, so the bound is per directory, not per store."""

WORKDIR_DEPTH_MAX = 64
"""Directory nesting a walk follows: deeper is a runaway recursion in the script, not a layout."""

COPY_CHUNK_BYTES = 1 << 20

_KIND_FILE = "file"
_KIND_LINK = "link"
_KIND_DIRECTORY = "dir"


class WorkdirError(ConfigError):
    """A working directory over a limit, or a manifest with a name that could leave the directory."""


class ManifestEntry(NamedTuple):
    """One entry of a directory: ``mode`` is the full ``st_mode`` (its type bits say file, link or dir);
    ``sha256`` is the content's (a link's target text; empty for a directory), ``size`` its length."""

    path: str
    sha256: str
    mode: int
    size: int


FilesManifest = tuple[ManifestEntry, ...]
"""A directory's entries sorted by relative path (``/``-separated): plain data, msgpack-able as lists."""


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return _KIND_LINK
    if stat.S_ISDIR(mode):
        return _KIND_DIRECTORY
    return _KIND_FILE


def manifest_digest(manifest: FilesManifest) -> str:
    """sha256 over the sorted (relative path, kind, size, sha256): what the World keeps as
    ``workdir_sha256``. Modes and times are left out (a copy may not keep them); the kind is in, so a
    link is never taken for a file holding its target's name."""
    digest = hashlib.sha256()
    for entry in sorted(manifest):
        digest.update(f"{entry.path}\0{_kind(entry.mode)}\0{entry.size}\0{entry.sha256}\n".encode())
    return digest.hexdigest()


EMPTY_DIGEST = manifest_digest(())


def check_name(path: str) -> None:
    """Refuse a manifest name that is absolute or could climb out of the directory."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\0" in path or any(part in ("", ".", "..") for part in parts):
        raise WorkdirError(f"working directory entry {path!r} is not a plain relative path")


def _walk(root: str, what: str) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (not following links), sorted, within the limits; specials skipped."""
    found: list[tuple[str, os.stat_result]] = []
    content_bytes = 0
    pending = [("", 0)]
    while pending:
        prefix, depth = pending.pop()
        if depth > WORKDIR_DEPTH_MAX:
            raise WorkdirError(f"{what} nests directories deeper than WORKDIR_DEPTH_MAX={WORKDIR_DEPTH_MAX}")
        with os.scandir(os.path.join(root, prefix) if prefix else root) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if not (
                    stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode) or stat.S_ISDIR(info.st_mode)
                ):
                    continue
                relative = f"{prefix}/{entry.name}" if prefix else entry.name
                found.append((relative, info))
                if len(found) > WORKDIR_FILES_MAX:
                    raise WorkdirError(
                        f"{what} holds more than WORKDIR_FILES_MAX={WORKDIR_FILES_MAX} entries"
                    )
                if stat.S_ISREG(info.st_mode):
                    content_bytes += info.st_size
                    if content_bytes > WORKDIR_BYTES_MAX:
                        raise WorkdirError(
                            f"{what} holds more than WORKDIR_BYTES_MAX={WORKDIR_BYTES_MAX} bytes of files"
                        )
                elif stat.S_ISDIR(info.st_mode):
                    pending.append((relative, depth + 1))
    found.sort(key=lambda item: item[0])
    return found


def _hash_file(path: str) -> str:
    digest = hashlib.sha256()
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as stream:
        while chunk := stream.read(COPY_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _entry(relative: str, info: os.stat_result, sha256: str) -> ManifestEntry:
    size = info.st_size if not stat.S_ISDIR(info.st_mode) else 0
    return ManifestEntry(relative, sha256, info.st_mode, size)


def _source_name(source: str) -> str:
    return f"workdir {source!r}"


def source_digest(source: str) -> str:
    """The digest a copy of ``source`` would have ('' = an empty start), without copying it: for the
    World's initial state, so a re-execution from a different directory is seen before it runs."""
    if not source:
        return EMPTY_DIGEST
    if not os.path.isdir(source):
        raise ConfigError(f"config key 'workdir': {source!r} is not a directory")
    entries = []
    for relative, info in _walk(source, _source_name(source)):
        full = os.path.join(source, relative)
        if stat.S_ISREG(info.st_mode):
            sha256 = _hash_file(full)
        elif stat.S_ISLNK(info.st_mode):
            sha256 = hashlib.sha256(os.fsencode(os.readlink(full))).hexdigest()
        else:
            sha256 = ""
        entries.append(_entry(relative, info, sha256))
    return manifest_digest(tuple(entries))


def changed_since_recording(recorded_sha256: str, source: str) -> str | None:
    """None when ``source`` still has the recorded digest, else the one line to tell the user."""
    current = source_digest(source)
    if current == recorded_sha256:
        return None
    return (
        f"the working directory changed since the recording (workdir {source!r}: sha256 {current[:16]}, "
        f"recorded {recorded_sha256[:16]}); restore it, or rerun on purpose"
    )


class BlobStore:
    """Content-addressed copies of file contents, ``<root>/<sha[:2]>/<sha>``, each stored once."""

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.bytes_stored = 0

    def path(self, sha256: str) -> str:
        return os.path.join(self.root, sha256[:2], sha256)

    def has(self, sha256: str) -> bool:
        return os.path.exists(self.path(sha256))

    def put_file(self, source: str) -> tuple[str, int]:
        """Copy ``source`` (never through a link) into the store while hashing it: (sha256, size)."""
        digest = hashlib.sha256()
        size = 0
        handle, temporary = tempfile.mkstemp(dir=self.root, prefix=".incoming-")
        try:
            with os.fdopen(handle, "wb") as target:
                descriptor = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(descriptor, "rb") as stream:
                    while chunk := stream.read(COPY_CHUNK_BYTES):
                        digest.update(chunk)
                        target.write(chunk)
                        size += len(chunk)
            return self._settle(temporary, digest.hexdigest(), size), size
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)

    def put_bytes(self, data: bytes) -> str:
        sha256 = hashlib.sha256(data).hexdigest()
        if not self.has(sha256):
            handle, temporary = tempfile.mkstemp(dir=self.root, prefix=".incoming-")
            with os.fdopen(handle, "wb") as target:
                target.write(data)
            self._settle(temporary, sha256, len(data))
        return sha256

    def read_bytes(self, sha256: str) -> bytes:
        with open(self.path(sha256), "rb") as stream:
            return stream.read()

    def _settle(self, temporary: str, sha256: str, size: int) -> str:
        final = self.path(sha256)
        if os.path.exists(final):
            os.unlink(temporary)
        else:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(temporary, final)
            self.bytes_stored += size
        return sha256

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class _Seen(NamedTuple):
    """A file as a capture or restore last saw it; trusted only if it was older than that stamp."""

    size: int
    mtime_ns: int
    inode: int
    mode: int
    sha256: str
    stamp_ns: int


class WorkingDirectory:
    """One execution's private working directory under its own temporary root; see the module docstring."""

    def __init__(self, root: str, store: BlobStore, *, owns_store: bool) -> None:
        self.root = root
        self.path = os.path.join(root, "work")
        os.makedirs(self.path, exist_ok=True)
        self.store = store
        self._owns_store = owns_store
        self._seen: dict[str, _Seen] = {}
        self._content_bytes = 0
        self.closed = False
        self.in_use = False
        """Whether a live driver's ranks run here now (one live execution per directory: host.py)."""

    @classmethod
    def create(cls, source: str | None = None, store: BlobStore | None = None) -> WorkingDirectory:
        """A fresh private directory: empty, or a copy of ``source`` (links copied as links)."""
        if source and not os.path.isdir(source):
            raise ConfigError(f"config key 'workdir': {source!r} is not a directory")
        root = tempfile.mkdtemp(prefix="timetravel-workdir-")
        owns_store = store is None
        directory = cls(root, store or BlobStore(os.path.join(root, "blobs")), owns_store=owns_store)
        try:
            if source:
                directory._copy_from(source)
            directory.capture()
        except BaseException:
            directory.close()
            raise
        _open.append(directory)
        return directory

    def _copy_from(self, source: str) -> None:
        for relative, info in _walk(source, _source_name(source)):
            origin = os.path.join(source, relative)
            target = os.path.join(self.path, relative)
            if stat.S_ISDIR(info.st_mode):
                os.mkdir(target)
            elif stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(origin), target)
            else:
                shutil.copyfile(origin, target, follow_symlinks=False)
                os.chmod(target, stat.S_IMODE(info.st_mode))
        for relative, info in _walk(source, _source_name(source)):
            if stat.S_ISDIR(info.st_mode):
                os.chmod(os.path.join(self.path, relative), stat.S_IMODE(info.st_mode))

    def _stamp_ns(self) -> int:
        """The filesystem's own clock now: files modified from here on have an mtime at least this."""
        stamp = os.path.join(self.root, "stamp")
        with open(stamp, "wb") as stream:
            stream.write(b"0")
        return os.stat(stamp).st_mtime_ns

    def capture(self) -> FilesManifest:
        """The directory's entries now; new or changed file contents go into the blob store."""
        stamp_ns = self._stamp_ns()
        entries = []
        seen: dict[str, _Seen] = {}
        content_bytes = 0
        for relative, info in _walk(self.path, f"the working directory {self.path!r}"):
            full = os.path.join(self.path, relative)
            if stat.S_ISDIR(info.st_mode):
                entries.append(_entry(relative, info, ""))
                continue
            if stat.S_ISLNK(info.st_mode):
                entries.append(_entry(relative, info, self.store.put_bytes(os.fsencode(os.readlink(full)))))
                continue
            known = self._seen.get(relative)
            if (
                known is not None
                and (known.size, known.mtime_ns, known.inode, known.mode)
                == (info.st_size, info.st_mtime_ns, info.st_ino, info.st_mode)
                and known.mtime_ns < known.stamp_ns
                and self.store.has(known.sha256)
            ):
                sha256 = known.sha256
                seen[relative] = known
            else:
                # the stat from before the copy: a write during the copy changes the mtime, so the
                # next capture hashes the file again
                sha256, size = self.store.put_file(full)
                seen[relative] = _Seen(size, info.st_mtime_ns, info.st_ino, info.st_mode, sha256, stamp_ns)
            content_bytes += seen[relative].size
            entries.append(ManifestEntry(relative, sha256, info.st_mode, seen[relative].size))
        self._seen = seen
        self._content_bytes = content_bytes
        return tuple(entries)

    def restore(self, manifest: FilesManifest) -> None:
        """Make the directory exactly ``manifest``: remove what it does not hold, write what differs.

        A file that exists as a file is rewritten in place (same inode), so a resumed rank that kept it
        open still sees the path's restored content. Nothing is written through a link."""
        wanted = _checked(manifest)
        stamp_ns = self._stamp_ns()
        current = {relative: info for relative, info in _walk_unbounded(self.path)}
        for relative in sorted(current, reverse=True):  # children before their parents
            entry = wanted.get(relative)
            if entry is None or _kind(entry.mode) != _kind(current[relative].st_mode):
                _remove(os.path.join(self.path, relative), current[relative])
                self._seen.pop(relative, None)
        seen: dict[str, _Seen] = {}
        content_bytes = 0
        for relative in sorted(wanted):
            entry = wanted[relative]
            full = os.path.join(self.path, relative)
            kind = _kind(entry.mode)
            existing = os.lstat(full) if os.path.lexists(full) else None
            if kind == _KIND_DIRECTORY:
                if existing is None:
                    os.mkdir(full, 0o700)
                else:
                    os.chmod(full, 0o700 | stat.S_IMODE(existing.st_mode))
                continue
            if kind == _KIND_LINK:
                target = os.fsdecode(self.store.read_bytes(entry.sha256))
                if existing is not None and os.readlink(full) != target:
                    os.unlink(full)
                    existing = None
                if existing is None:
                    os.symlink(target, full)
                continue
            known = self._seen.get(relative)
            unchanged = (
                existing is not None
                and known is not None
                and known.sha256 == entry.sha256
                and (known.size, known.mtime_ns, known.inode)
                == (existing.st_size, existing.st_mtime_ns, existing.st_ino)
                and known.mtime_ns < known.stamp_ns
            )
            if not unchanged:
                self._write(full, entry, existing is not None)
            if stat.S_IMODE(os.lstat(full).st_mode) != stat.S_IMODE(entry.mode):
                os.chmod(full, stat.S_IMODE(entry.mode))
            info = os.lstat(full)
            recorded_stamp = known.stamp_ns if unchanged and known is not None else stamp_ns
            seen[relative] = _Seen(
                info.st_size, info.st_mtime_ns, info.st_ino, info.st_mode, entry.sha256, recorded_stamp
            )
            content_bytes += info.st_size
        for relative in sorted(wanted, reverse=True):  # directory modes last: a 0o555 one was filled first
            entry = wanted[relative]
            if _kind(entry.mode) == _KIND_DIRECTORY:
                os.chmod(os.path.join(self.path, relative), stat.S_IMODE(entry.mode))
        self._seen = seen
        self._content_bytes = content_bytes

    def _write(self, full: str, entry: ManifestEntry, exists: bool) -> None:
        if exists:
            os.chmod(full, 0o600)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        descriptor = os.open(full, flags, 0o600)
        with os.fdopen(descriptor, "wb") as target, open(self.store.path(entry.sha256), "rb") as blob:
            shutil.copyfileobj(blob, target, COPY_CHUNK_BYTES)

    def bytes_used(self) -> int:
        """Disk this execution holds in its temporary root: the directory's file content at the last
        capture or restore, plus the blob store when this directory owns it."""
        return self._content_bytes + (self.store.bytes_stored if self._owns_store else 0)

    def close(self) -> None:
        """Remove the directory, and the blob store if it is this directory's own. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        if self in _open:
            _open.remove(self)
        for directory, _subdirectories, _files in os.walk(self.path):
            with contextlib.suppress(OSError):
                os.chmod(directory, 0o700)  # a read-only directory the script made must not block removal
        shutil.rmtree(self.root, ignore_errors=True)
        if self._owns_store:
            self.store.close()


def _checked(manifest: FilesManifest) -> dict[str, ManifestEntry]:
    if len(manifest) > WORKDIR_FILES_MAX:
        raise WorkdirError(
            f"a manifest of {len(manifest)} entries is over WORKDIR_FILES_MAX={WORKDIR_FILES_MAX}"
        )
    wanted: dict[str, ManifestEntry] = {}
    content_bytes = 0
    for raw in manifest:
        entry = ManifestEntry(*raw)
        check_name(entry.path)
        if entry.path.count("/") > WORKDIR_DEPTH_MAX:
            raise WorkdirError(f"entry {entry.path!r} is deeper than WORKDIR_DEPTH_MAX={WORKDIR_DEPTH_MAX}")
        if entry.path in wanted:
            raise WorkdirError(f"entry {entry.path!r} appears twice in the manifest")
        wanted[entry.path] = entry
        if _kind(entry.mode) == _KIND_FILE:
            content_bytes += entry.size
    if content_bytes > WORKDIR_BYTES_MAX:
        raise WorkdirError(
            f"a manifest of {content_bytes} bytes is over WORKDIR_BYTES_MAX={WORKDIR_BYTES_MAX}"
        )
    for path in wanted:
        parent = path.rpartition("/")[0]
        if parent and (parent not in wanted or _kind(wanted[parent].mode) != _KIND_DIRECTORY):
            raise WorkdirError(f"entry {path!r} has no directory {parent!r} in the manifest")
    return wanted


def _walk_unbounded(root: str) -> list[tuple[str, os.stat_result]]:
    """Everything under ``root`` for removal (not following links): a restore must be able to clean up
    a directory the ranks filled beyond the limits."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        prefix = os.path.relpath(directory, root)
        for name in [*subdirectories, *files]:
            relative = name if prefix == "." else f"{prefix}/{name}"
            found.append((relative, os.lstat(os.path.join(directory, name))))
    return found


def _remove(full: str, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        for directory, _subdirectories, _files in os.walk(full):
            with contextlib.suppress(OSError):
                os.chmod(directory, 0o700)
        shutil.rmtree(full)
    else:
        os.unlink(full)


_open: list[WorkingDirectory] = []
"""Every directory not closed yet: removed at exit whatever else happened (a Session's checkpoints
keep theirs until the last torch Session closes; a run's driver closes its own)."""


def _close_all() -> None:
    for directory in list(_open):
        directory.close()


atexit.register(_close_all)
