"""Attribute replacements that a rank installs once and a test can take back.

A rank process installs its environment before the user's script runs and never uninstalls it.
The tests run the same installers inside the pytest process, so every replacement is recorded
and :meth:`Patches.undo` restores the previous values in reverse order.

Function replacements also rebind *aliases*: a module that ran ``from time import perf_counter``
(or ``timeit.default_timer = time.perf_counter``) before installing holds the original function
under its own name. :meth:`Patches.rebind_aliases` scans the loaded modules once and points such
names at the replacement, as the determinism guard does for handlers
(:mod:`timetravel.sim.guard.patches`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from timetravel.sim.guard.wrappers import set_type_attribute

_MISSING = object()


class Patches:
    """A list of (namespace, name, previous value) to undo, plus the function map for aliases."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self._replacements: dict[int, tuple[Any, Any]] = {}

    def replace(self, owner: Any, name: str, value: Any, *, aliases: bool = True) -> Any:
        """Set ``owner.name = value`` (a module or a Python class); returns the previous value.

        With ``aliases`` (the default), :meth:`rebind_aliases` also rebinds other names of the
        previous value.
        """
        namespace = owner.__dict__
        previous = namespace.get(name, _MISSING)
        setattr(owner, name, value)

        def undo() -> None:
            if previous is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)

        self._undo.append(undo)
        if aliases and previous is not _MISSING and callable(previous):
            self._replacements[id(previous)] = (previous, value)
        return None if previous is _MISSING else previous

    def wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> Any:
        """Replace ``owner.name`` by ``make(original)``; returns the original (None if absent)."""
        original = owner.__dict__.get(name)
        if original is None:
            original = getattr(owner, name, None)  # inherited (torch.Tensor from TensorBase)
        if original is None:
            return None
        replacement = make(original)
        for attribute in ("__name__", "__qualname__", "__doc__"):
            with contextlib.suppress(AttributeError, TypeError):
                setattr(replacement, attribute, getattr(original, attribute))
        self.replace(owner, name, replacement)
        return original

    def replace_type_attribute(self, cls: type, name: str, value: Any) -> bool:
        """Set an attribute of a C type (``datetime.datetime.now``); False when the interpreter refuses."""
        previous = cls.__dict__.get(name, _MISSING)
        if not set_type_attribute(cls, name, value):
            return False

        def undo() -> None:
            if previous is not _MISSING:
                set_type_attribute(cls, name, previous)

        self._undo.append(undo)
        return True

    def set_item(self, mapping: Any, key: str, value: Any) -> None:
        """``mapping[key] = value`` (``os.environ``), undone by restoring or deleting the key."""
        previous = mapping.get(key, _MISSING)
        mapping[key] = value

        def undo() -> None:
            if previous is _MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = previous

        self._undo.append(undo)

    def on_undo(self, action: Callable[[], None]) -> None:
        """Run ``action`` when undoing (after the replacements made later are undone)."""
        self._undo.append(action)

    def rebind_aliases(self, skip_prefixes: Iterable[str] = ()) -> int:
        """Point module-level names bound to a replaced original at its replacement; returns the count.

        Inside :func:`one_alias_scan` the scan is deferred and shared with the other installers.
        """
        prefixes = tuple(skip_prefixes)
        if _deferred is not None:
            _deferred.append((self, prefixes))
            return 0
        return _scan_modules([(self, prefixes)])

    def _rebind(self, namespace: dict[str, Any], name: str, value: Any) -> None:
        namespace[name] = self._replacements[id(value)][1]
        self._undo.append(_restore_item(namespace, name, value))

    def undo(self) -> None:
        """Restore everything, newest first (idempotent)."""
        while self._undo:
            self._undo.pop()()
        self._replacements.clear()


_deferred: list[tuple[Patches, tuple[str, ...]]] | None = None


def _scan_modules(requests: list[tuple[Patches, tuple[str, ...]]]) -> int:
    """One pass over the loaded modules for every (patches, skipped prefixes) request."""
    requests = [(patches, prefixes) for patches, prefixes in requests if patches._replacements]
    if not requests:
        return 0
    wanted: set[int] = set()
    for patches, _prefixes in requests:
        wanted.update(patches._replacements)
    count = 0
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None) if module is not None else None
        if type(namespace) is not dict:
            continue
        hits = [(name, value) for name, value in namespace.items() if id(value) in wanted]
        for name, value in hits:
            for patches, prefixes in requests:
                entry = patches._replacements.get(id(value))
                if entry is None or entry[0] is not value or (prefixes and module_name.startswith(prefixes)):
                    continue
                patches._rebind(namespace, name, value)
                count += 1
                break
    return count


@contextlib.contextmanager
def one_alias_scan() -> Iterator[None]:
    """Installers inside this block share one scan of the loaded modules, made at its end.

    Each scan walks every module's namespace (about 2,000 modules and 80,000 names once torch is
    imported, ~0.15 s); :func:`install_all` runs six installers.
    """
    global _deferred
    if _deferred is not None:
        yield
        return
    _deferred = []
    try:
        yield
        requests = _deferred
    finally:
        _deferred = None
    _scan_modules(requests)


def _restore_item(namespace: dict[str, Any], name: str, value: Any) -> Callable[[], None]:
    def undo() -> None:
        namespace[name] = value

    return undo


class Installation:
    """What an ``install_*`` function returns: call :meth:`uninstall` (tests) or keep it (ranks).

    Usable as a context manager: ``with install_time(clock): ...``.
    """

    def __init__(self, name: str, patches: Patches, state: Any = None) -> None:
        self.name = name
        self.patches = patches
        self.state = state
        self.installed = True

    def uninstall(self) -> None:
        if self.installed:
            self.patches.undo()
            self.installed = False

    def __enter__(self) -> Installation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    def __repr__(self) -> str:
        return f"<{self.name} {'installed' if self.installed else 'uninstalled'}>"


class _AfterImport:
    """A ``sys.meta_path`` finder that runs callbacks once a named module has executed."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[Any], None]]] = {}
        self._finding: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.callbacks or fullname in self._finding:
            return None
        import importlib.util

        self._finding.add(fullname)  # find the real spec with the other finders
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        callbacks = self.callbacks

        class Loader:
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                for callback in callbacks.pop(fullname, []):
                    callback(module)

        spec.loader = Loader()  # type: ignore[assignment]
        return spec


def when_imported(patches: Patches, module_name: str, callback: Callable[[Any], None]) -> None:
    """Run ``callback(module)`` now if ``module_name`` is loaded, else right after the script imports it.

    Patching a library only when the script uses it keeps a rank from importing (and paying for)
    tensorboard or wandb when nobody asked for them.
    """
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return
    finder = _AfterImport()
    finder.callbacks[module_name] = [callback]
    sys.meta_path.insert(0, finder)

    def undo() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        finder.callbacks.clear()

    patches.on_undo(undo)
