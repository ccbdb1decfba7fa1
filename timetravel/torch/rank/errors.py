"""How a rank's script ended in error, told to the coordinator: the message, the kind, where.

A rank's exception becomes its ``exit`` message's ``error``, ``error_kind``, ``traceback`` and
``where``. The kind says whose error it is, from where the exception came:

* ``unsupported`` — something the simulator refuses on purpose (an exception whose class says
  ``failure_kind = "unsupported"``: a collective it does not implement, a CUDA feature with no CPU
  meaning);
* ``internal`` — timetravel's own error: the innermost frame is timetravel's code, and neither a
  wrapper that hands the script's arguments to torch (:func:`passes_through`) nor an error raised on
  purpose where torch or Python would raise it (:func:`the_scripts`). ``where`` is then timetravel's
  frame: never "rN raised …" against the user's script;
* ``oom`` — an allocation past the rank's memory limit (``rank_memory_max``, world/memory.py): a
  MemoryError, torch's OutOfMemoryError or its CPU allocator's RuntimeError;
* ``exception`` — everything else: the script's own error (raised in its code, in torch or in a
  library it called), ``where`` the innermost frame of the user's code.

A file error on a relative path gets a hint: ranks run in a private working directory
(timetravel/torch/world/workdir.py).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from types import CodeType, TracebackType
from typing import Any, TypeVar

from timetravel.torch.protocol.limits import TRACEBACK_CHARS_MAX

RELATIVE_PATH_HINT = (
    "(ranks run in a private working directory: pass --workdir DIR to start it as a copy of DIR)"
)
PACKAGE_DIRECTORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
"""timetravel's own code: a frame of a file below it is the simulator's."""
_KIND_ATTRIBUTE = "failure_kind"
_PASS_THROUGH: set[CodeType] = set()
"""Code of the wrappers that hand the script's arguments to torch (filled as they are defined)."""

Error = TypeVar("Error", bound=BaseException)
Function = TypeVar("Function", bound=Callable[..., Any])


def passes_through(function: Function) -> Function:
    """Mark ``function`` as a wrapper that hands the script's arguments to torch's own function: an
    exception that comes out of the call it makes is torch's answer to the script, not ours."""
    _PASS_THROUGH.add(function.__code__)
    return function


def the_scripts(error: Error) -> Error:
    """Mark ``error``, raised by timetravel on purpose where torch or Python raise the same (with
    their message), as the script's error."""
    setattr(error, _KIND_ATTRIBUTE, "exception")
    return error


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
    """``unsupported``, ``oom``, ``internal`` or ``exception``: see the module docstring."""
    kind = getattr(error, _KIND_ATTRIBUTE, None)
    if kind in ("unsupported", "exception"):
        return str(kind)
    if _out_of_memory(error):
        return "oom"
    innermost = _innermost(error.__traceback__)
    if innermost is None or innermost.tb_frame.f_code in _PASS_THROUGH:
        return "exception"
    return "internal" if _ours(innermost.tb_frame.f_code.co_filename) else "exception"


def _out_of_memory(error: BaseException) -> bool:
    """An allocation past the rank's memory limit (world/memory.py): Python's MemoryError, torch's
    OutOfMemoryError, or the RuntimeError torch's CPU allocator raises."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return True
    return isinstance(error, RuntimeError) and any(text in str(error) for text in ALLOCATOR_FAILURES)


def describe_error(error: BaseException) -> dict[str, Any]:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    kind = error_kind(error)
    hint = relative_path_hint(error) if kind == "exception" else ""
    return {
        "code": 1,
        "error": f"{type(error).__name__}: {error}" + (f" {hint}" if hint else ""),
        "error_kind": kind,
        "traceback": text[-TRACEBACK_CHARS_MAX:],
        "where": _our_frame(error) if kind == "internal" else _user_frame(error),
    }


def _innermost(tb: TracebackType | None) -> TracebackType | None:
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _ours(filename: str) -> bool:
    return os.path.abspath(filename).startswith(PACKAGE_DIRECTORY)


def _our_frame(error: BaseException) -> str:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def _user_frame(error: BaseException) -> str:
    """The innermost frame outside timetravel and torch: where the user's code raised."""
    torch_module = sys.modules.get("torch")
    torch_file = getattr(torch_module, "__file__", None)
    torch_directory = os.path.dirname(os.path.abspath(torch_file)) + os.sep if torch_file else None
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = os.path.abspath(frame.filename)
        if _ours(path) or frame.filename.startswith("<frozen"):
            continue
        if torch_directory is not None and path.startswith(torch_directory):
            continue
        return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return ""
