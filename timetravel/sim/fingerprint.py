"""Fingerprints that tell "your code changed" and "another platform" apart from a determinism bug.

The code fingerprint hashes the source of the timetravel package (its Python files and the kernel's
layers' optional compiled code, each ``_speedups.c`` and its headers) and of the scenario's module;
the platform fingerprint hashes what can change float results or hashing between machines (the
Python version, numpy's version, the CPU architecture, the byte order). A recording carries both,
so when a replay does not match, the report can say which of the three it is.
"""

from __future__ import annotations

import functools
import platform
import sys
from pathlib import Path

import numpy as np
import xxhash

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def package_fingerprint() -> str:
    hasher = xxhash.xxh3_128()
    sources = [*_PACKAGE_ROOT.rglob("*.py"), *_PACKAGE_ROOT.rglob("*.c"), *_PACKAGE_ROOT.rglob("*.h")]
    for path in sorted(sources):
        hasher.update(str(path.relative_to(_PACKAGE_ROOT)).encode())
        hasher.update(path.read_bytes())
    return hasher.hexdigest()


def code_fingerprint(scenario_module: str | None = None) -> str:
    """Hash of timetravel's source plus the scenario module's source when it lives elsewhere."""
    hasher = xxhash.xxh3_128(package_fingerprint().encode())
    module = sys.modules.get(scenario_module or "")
    source = getattr(module, "__file__", None)
    if source and not Path(source).resolve().is_relative_to(_PACKAGE_ROOT):
        hasher.update(Path(source).read_bytes())
    return hasher.hexdigest()


@functools.cache
def platform_fingerprint() -> str:
    facts = [
        platform.python_implementation(),
        platform.python_version(),
        np.__version__,
        platform.machine(),
        sys.byteorder,
        platform.system(),
    ]
    return xxhash.xxh3_128("\x00".join(facts).encode()).hexdigest()
