"""How a rank's script ended in error, told to the coordinator: the message, the kind, where.

A rank's exception becomes its ``exit`` message's ``error``, ``error_kind``, ``traceback`` and
``where`` (the innermost frame of the user's code). A file error on a relative path gets a hint:
ranks run in a private working directory (timetravel/torch/world/workdir.py).
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from timetravel.torch.protocol.limits import TRACEBACK_CHARS_MAX

RELATIVE_PATH_HINT = (
    "(ranks run in a private working directory: pass --workdir DIR to start it as a copy of DIR)"
)


_TORCH_SAVE_NO_PARENT = "Parent directory "


def relative_path_hint(error: BaseException) -> str:
    """The hint for a rank's FileNotFoundError / IsADirectoryError on a relative path (or torch.save's
    RuntimeError ``Parent directory x does not exist.`` for a relative x), else ''."""
    if isinstance(error, RuntimeError) and str(error).startswith(_TORCH_SAVE_NO_PARENT):
        parent = str(error)[len(_TORCH_SAVE_NO_PARENT) :].removesuffix(" does not exist.")
        return "" if os.path.isabs(parent) else RELATIVE_PATH_HINT
    if not isinstance(error, (FileNotFoundError, IsADirectoryError)):
        return ""
    name = error.filename
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if not isinstance(name, str) or os.path.isabs(name):
        return ""
    return RELATIVE_PATH_HINT


ALLOCATOR_FAILURES = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")
"""torch's CPU allocator's messages when an allocation fails (a RuntimeError, not a MemoryError)."""


def error_kind(error: BaseException) -> str:
    """``unsupported`` (something the simulator refuses), ``oom`` (an allocation past the rank's
    memory limit: world/memory.py) or ``exception`` (the script's own)."""
    from timetravel.torch.rank.backend import UnsupportedCollective

    if isinstance(error, UnsupportedCollective):
        return "unsupported"
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return "oom"
    if isinstance(error, RuntimeError) and any(text in str(error) for text in ALLOCATOR_FAILURES):
        return "oom"
    return "exception"


def describe_error(error: BaseException) -> dict[str, Any]:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    kind = error_kind(error)
    hint = relative_path_hint(error)
    return {
        "code": 1,
        "error": f"{type(error).__name__}: {error}" + (f" {hint}" if hint else ""),
        "error_kind": kind,
        "traceback": text[-TRACEBACK_CHARS_MAX:],
        "where": _user_frame(error),
    }


def _user_frame(error: BaseException) -> str:
    """The innermost frame outside timetravel and torch: where the user's code raised."""
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        if (
            "/timetravel/" not in frame.filename
            and "/torch/" not in frame.filename
            and "<frozen" not in frame.filename
        ):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return ""
