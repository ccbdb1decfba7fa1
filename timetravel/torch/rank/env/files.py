"""Writes outside the working directory, reported (rank side).

Files under a rank's working directory belong to the branch (:mod:`timetravel.torch.world.workdir` captures
and restores them); a file written anywhere else is shared by every run and every branch, so a script
that resumes from it can read a future it has not lived. ``install_file_watch`` reports such writes as
the warning ``write_outside_workdir`` (once per directory, the path as its detail), which the run's
summary lists. It is a warning, not a failure: the run itself is still exact.

What counts as a write: a ``sys.addaudithook`` hook sees ``open`` with a write, append, create or
truncate mode (``open``, ``os.open``, ``pathlib``'s writers, numpy, logging's file handlers…) and the
``os.rename``/``os.replace``, ``os.remove``, ``os.rmdir``, ``os.mkdir``, ``os.truncate``, ``os.symlink``,
``os.link``, ``shutil.copyfile``, ``shutil.copytree``, ``shutil.move`` and ``shutil.rmtree`` events.
``torch.save`` to a path writes through C++ and raises no audit event, so it is wrapped and checked too.

Not reported: paths under the working directory, ``/dev``, ``/proc``, ``/sys``, Python's own
``__pycache__`` files, and torch's compiler caches (``torchinductor_*`` in the temp folder, ``~/.triton``,
the user's cache folder ``$XDG_CACHE_HOME`` or ``~/.cache``): none of them is the script's state.
Paths relative to a ``dir_fd`` and writes to file descriptors are not resolved (not reported). An audit
hook cannot be removed: :meth:`Installation.uninstall` switches it off.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from timetravel.torch.rank.env.patching import Installation, Patches, when_imported

WRITE_OUTSIDE_WORKDIR = "write_outside_workdir"

REPORTED_DIRECTORIES_MAX = 256
"""Directories a rank reports writes into; beyond this it stays silent (a log in every folder of a
tree must not flood the channel)."""

WRITTEN_ARGUMENTS: dict[str, tuple[tuple[int, int | None], ...]] = {
    "os.rename": ((0, 2), (1, 3)),
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.mkdir": ((0, 2),),
    "os.truncate": ((0, None),),
    "os.symlink": ((1, 2),),
    "os.link": ((1, 3),),
    "shutil.copyfile": ((1, None),),
    "shutil.copytree": ((1, None),),
    "shutil.move": ((0, None), (1, None)),
    "shutil.rmtree": ((0, 1),),
}
"""Audit events that change the filesystem: for each path they change, its argument's position and the
position of the ``dir_fd`` it is relative to (a path relative to a descriptor is not resolved: the
files ``shutil.rmtree`` removes one by one that way are covered by its own event)."""

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def exempt_prefixes(working_directory: str) -> tuple[str, ...]:
    """Real-path prefixes (each ending in ``/``) under which writes are not reported."""
    home = os.path.expanduser("~")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    prefixes = [working_directory, "/dev", "/proc", "/sys", cache, os.path.join(home, ".triton")]
    return tuple(os.path.join(os.path.realpath(prefix), "") for prefix in prefixes)


class FileWatch:
    """The hook's state: where the working directory is, what was reported already."""

    def __init__(self, working_directory: str, warn: Callable[[str, str], None]) -> None:
        self.move_to(working_directory)
        self.temporary = os.path.join(os.path.realpath(tempfile.gettempdir()), "")
        self.warn = warn
        self.pid = os.getpid()
        """The rank's pid: logical once env/identity.py is installed (the same in a rank resumed from a
        checkpoint, which then watches on); a forked child's is its own (it reports nothing)."""
        self.enabled = True
        self.reported: set[str] = set()
        self.busy = False

    def move_to(self, working_directory: str) -> None:
        """The rank's working directory is now ``working_directory`` (a rank resumed from a checkpoint
        runs in the private directory of the execution it resumes into: rank/checkpoint.py)."""
        self.working_directory = os.path.realpath(working_directory)
        self.exempt = exempt_prefixes(self.working_directory)

    def outside(self, path: Any) -> str | None:
        """The resolved path when writing ``path`` is a write outside the working directory, else None."""
        if isinstance(path, int) or path is None:
            return None
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            return None
        resolved = os.path.realpath(text)
        if os.path.join(resolved, "").startswith(self.exempt) or "/__pycache__/" in resolved:
            return None
        if resolved.startswith(self.temporary) and resolved[len(self.temporary) :].startswith(
            "torchinductor_"
        ):
            return None
        return resolved

    def check(self, path: Any) -> None:
        """Report a write to ``path`` if it is outside, once per directory (and never from a child)."""
        if not self.enabled or self.busy or os.getpid() != self.pid:
            return
        self.busy = True  # resolving a path or warning must not report itself
        try:
            resolved = self.outside(path)
            if resolved is None:
                return
            directory = os.path.dirname(resolved)
            if directory in self.reported or len(self.reported) >= REPORTED_DIRECTORIES_MAX:
                return
            self.reported.add(directory)
            self.warn(WRITE_OUTSIDE_WORKDIR, resolved)
        except Exception:  # an audit hook that raised would break the script's own call
            pass
        finally:
            self.busy = False

    def hook(self, event: str, arguments: tuple[Any, ...]) -> None:
        if event == "open":
            if len(arguments) >= 3 and _writes(arguments[1], arguments[2]):
                self.check(arguments[0])
            return
        positions = WRITTEN_ARGUMENTS.get(event)
        if positions is None:
            return
        for position, descriptor_position in positions:
            if descriptor_position is not None and descriptor_position < len(arguments):
                descriptor = arguments[descriptor_position]
                if descriptor is not None and descriptor != -1:
                    continue
            if position < len(arguments):
                self.check(arguments[position])


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and any(letter in mode for letter in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


_watches: list[FileWatch] = []
"""The installed watch (at most one in a rank): :func:`working_directory_moved` finds it."""


def working_directory_moved(working_directory: str) -> None:
    """The rank now runs in ``working_directory`` (a resumed checkpoint): writes are judged against it."""
    for watch in _watches:
        watch.move_to(working_directory)


def install_file_watch(working_directory: str, warn: Callable[[str, str], None]) -> Installation:
    """Report writes outside ``working_directory`` through ``warn(name, path)``; see the module docstring."""
    watch = FileWatch(working_directory, warn)
    watched = frozenset(("open", *WRITTEN_ARGUMENTS))
    handle = watch.hook

    def hook(event: str, arguments: tuple[Any, ...]) -> None:
        if event in watched:  # the hook runs on every audit event (id(), imports…): return fast
            handle(event, arguments)

    sys.addaudithook(hook)
    patches = Patches()
    _watches.append(watch)

    def switch_off() -> None:
        watch.enabled = False
        _watches.remove(watch)

    patches.on_undo(switch_off)
    when_imported(patches, "torch", lambda module: _wrap_torch_save(patches, module, watch))
    return Installation("file_watch", patches, watch)


def _wrap_torch_save(patches: Patches, torch_module: Any, watch: FileWatch) -> None:
    """``torch.save(obj, "path")`` opens its file in C++: check the path before it does."""
    serialization = torch_module.serialization

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(f, (str, bytes, os.PathLike)):
                watch.check(f)
            return original(obj, f, *args, **kwargs)

        return save

    original = serialization.save
    wrapped = make(original)
    patches.replace(serialization, "save", wrapped, aliases=False)
    if torch_module.__dict__.get("save") is original:
        patches.replace(torch_module, "save", wrapped, aliases=False)
