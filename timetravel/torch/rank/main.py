"""The life of one rank process, from the zygote's fork to ``os._exit`` (rank side).

The zygote forks, then calls :func:`run_rank` in the child with the rank's spec (plain data from the
coordinator). The child becomes what torchrun would have started: its own environment variables, its
own ``sys.argv``, its own modules and RNGs (a fork copies the zygote, which imported torch but ran no
user code), then the user's script as ``__main__``. Every call to the World goes through one channel;
its output is sent to the coordinator, which prefixes it ``[rN]``; how it ended (returned, exit code,
exception with its traceback) is the last message. It never returns into the zygote.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import signal
import socket
import sys
import threading
from typing import Any

from timetravel.torch.protocol.limits import OUTPUT_LINE_CHARS_MAX
from timetravel.torch.protocol.wire import send_message
from timetravel.torch.rank.channel import Channel, StopRank
from timetravel.torch.rank.checkpoint import remember_zygote
from timetravel.torch.rank.checkpoint import take as take_checkpoint
from timetravel.torch.rank.errors import describe_error
from timetravel.torch.rank.process import (
    die_with_parent,
    lead_own_session,
    limit_memory,
    real_parent_pid,
    real_pid,
)


class RankOutput(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` of a rank: whole lines go to the coordinator."""

    def __init__(self, rank_channel: Channel, stream: str) -> None:
        self._channel = rank_channel
        self._stream = stream
        self._pending = ""
        self._lock = threading.Lock()  # a script's threads print too

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            complete = None
            if "\n" in self._pending:
                complete, _, self._pending = self._pending.rpartition("\n")
        if complete is not None:
            self._send(complete)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, ""
        if pending:
            self._send(pending)

    def _send(self, text: str) -> None:
        lines = [line[:OUTPUT_LINE_CHARS_MAX] for line in text.split("\n")]
        self._channel.post({"kind": "output", "stream": self._stream, "lines": lines})


def run_rank(spec: dict[str, Any]) -> None:
    """Run the script as rank ``spec['rank']`` and exit the process; see the module docstring."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the zygote's handler
    lead_own_session()  # what the script starts is ended with the rank (world/driver.py)
    die_with_parent()
    limit_memory(spec.get("memory_max_bytes"))  # past it: an oom failure, not an exhausted host
    remember_zygote(real_parent_pid())
    os.environ.clear()
    os.environ.update(spec["env"])
    if spec.get("cwd"):
        os.chdir(spec["cwd"])  # the execution's private working directory (timetravel.torch.world.workdir)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(spec["socket"])
    from timetravel.torch.rank.env.clock import RankClock

    rank_channel = Channel(sock, spec["rank"], RankClock(0))
    rank_channel.on_checkpoint = take_checkpoint
    send_message(sock, {"kind": "hello", "rank": spec["rank"], "pid": real_pid(), "t_ns": 0})
    code = _run_script(spec, rank_channel)
    os._exit(code)


def _run_script(spec: dict[str, Any], rank_channel: Channel) -> int:
    sys.stdout = RankOutput(rank_channel, "stdout")
    sys.stderr = RankOutput(rank_channel, "stderr")
    exit_message: dict[str, Any] = {"kind": "exit", "code": 0, "error": None, "error_kind": None}
    namespace: dict[str, Any] = {}  # the script's globals, alive until the at_script_end hooks ran
    try:
        from timetravel.torch.rank import setup as rank_setup

        rank_setup.install(spec, rank_channel)
        if spec.get("function"):
            exit_message["result"] = _plain(_call_function(spec))
        elif spec.get("module"):  # python -m MODULE: the launch folder first on the path, as python puts it
            sys.argv = [spec["script"], *spec["args"]]
            sys.path.insert(0, spec["env"].get("TIMETRAVEL_LAUNCH_DIR", os.getcwd()))
            namespace = runpy.run_module(spec["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [spec["script"], *spec["args"]]
            sys.path.insert(0, os.path.dirname(os.path.abspath(spec["script"])))
            namespace = runpy.run_path(spec["script"], run_name="__main__")
    except StopRank:
        return 0
    except SystemExit as exit_request:
        exit_message["code"] = _exit_code(exit_request.code)
    except BaseException as error:  # the script's own failure: reported once, in the failure record
        exit_message.update(describe_error(error))
    for hook in rank_channel.at_script_end:
        hook()
    namespace.clear()
    try:
        _flush_outputs()
        rank_channel.post(exit_message)
    except (OSError, StopRank):
        return int(exit_message["code"]) & 0xFF
    rank_channel.linger()
    return int(exit_message["code"]) & 0xFF


def _call_function(spec: dict[str, Any]) -> Any:
    import importlib

    for entry in reversed(spec["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    module_name, _, qualname = spec["function"].partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    sys.argv = [spec["function"]]
    return target()


def _plain(value: Any) -> Any:
    """A rank's return value as plain data (numbers, strings, lists, dicts; a tensor as a list)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return repr(value)


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _flush_outputs() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, StopRank):
            stream.flush()
