"""Fork checkpoints of a rank process (rank side; no torch here).

A rank's Python stack, its modules and optimizers are not plain data, but a process is a
copy-on-write snapshot of all of them: ``os.fork()`` at a quiescent point — the rank blocked in a
``wait`` for the World's next result, nothing in flight — freezes a copy that can be resumed later,
as often as needed, and trains on to the same bits (the coordinator hands it the same results).

Three processes take part, each the leader of a session of its own (the coordinator ends a rank with
its session: rank/process.py), and killing one never takes another with it:

* the **live rank** receives ``{"kind": "checkpoint"}`` while it waits, forks, and goes on waiting;
* the **checkpoint** (its child) closes the rank's channel, connects to the coordinator's
  checkpoint keeper, and sleeps on that control socket;
* a **resumed rank**, forked from the checkpoint on ``{"kind": "resume"}``, opens a fresh channel
  to the coordinator named in the request and returns into the wait it was frozen in, as if
  nothing had happened. Its output goes through the new channel.

A checkpoint outlives the rank it was forked from, so it cannot die with its parent by
``PR_SET_PDEATHSIG`` from the start: its lifelines are its control socket (EOF when the
coordinator goes) and, once orphaned, the zygote — a child subreaper, which adopts it — after which
it does set ``PR_SET_PDEATHSIG``. A resumed rank's lifeline is its channel. One fork each: a
double fork (to be the zygote's child at once) measured 60-90 ms a rank against 5-20 ms.

A checkpoint is refused (the coordinator re-executes instead) when the rank has other threads —
a fork copies only the calling one, and their locks with it — or maps writable shared memory
(``share_memory_()`` tensors, ``/dev/shm``): such pages are not copy-on-write, so the checkpoint
would see the live rank's later writes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
from typing import Any

from timetravel.torch.protocol.wire import ChannelClosed, receive_message, send_message
from timetravel.torch.rank.env.files import working_directory_moved
from timetravel.torch.rank.env.identity import adopt_this_process
from timetravel.torch.rank.process import die_with_parent, lead_own_session, real_parent_pid, real_pid

forking = [0]
"""Depth of checkpoint forks in progress: at-fork hooks (fork_after_init) leave them alone."""
_zygote_pid = [0]


def remember_zygote(pid: int) -> None:
    """The zygote's pid (the rank's parent at start): an orphaned checkpoint is adopted by it."""
    _zygote_pid[0] = pid


def refusal() -> str | None:
    """Why this process cannot be checkpointed by fork now, or None (shared memory is named first:
    ``share_memory_()`` may also start a helper thread, and the memory is the cause to fix)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split()
                perms = fields[1] if len(fields) > 1 else ""
                if len(perms) == 4 and perms[1] == "w" and perms[3] == "s":
                    where = fields[5] if len(fields) > 5 else "anonymous"
                    return f"the rank maps writable shared memory ({where}): not copy-on-write"
    except OSError:
        pass
    try:
        tasks = sorted(os.listdir("/proc/self/task"), key=int)
    except OSError:
        tasks = []
    if len(tasks) > 1:
        names = []
        for task in tasks[1:]:
            try:
                with open(f"/proc/self/task/{task}/comm", encoding="utf-8", errors="replace") as comm:
                    names.append(comm.read().strip())
            except OSError:
                names.append("?")
        return (
            f"the rank runs {len(tasks)} threads ({', '.join(names)} beside the main one; a fork copies one)"
        )
    return None


def take(channel: Any, request: dict[str, Any]) -> None:
    """Fork a checkpoint of this rank (called while it waits for a result); see the module docstring."""
    why = refusal()
    if why is not None:
        _tell_keeper(
            request, {"kind": "refused", "rank": channel.rank, "token": request["token"], "why": why}
        )
        return
    _reap_checkpoints()
    child = _fork()
    if child == 0:
        _serve(channel, request)  # returns only in a resumed rank
        return
    _children.append(child)


_children: list[int] = []
"""Checkpoints this live rank forked: reaped here when they end (only these, never the script's)."""


def _reap_checkpoints() -> None:
    for pid in list(_children):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _children.remove(pid)


def _fork() -> int:
    """One ``os.fork()`` that neither re-keys the rank's entropy nor counts as the script's fork."""
    from timetravel.torch.rank.env.entropy import preserving_entropy_across_fork

    _return_free_memory()
    forking[0] += 1
    try:
        with preserving_entropy_across_fork():
            return os.fork()
    finally:
        forking[0] -= 1


def _return_free_memory() -> None:
    """Give the allocator's free pages back to the OS before forking (glibc ``malloc_trim``).

    A checkpoint's private memory is the pages the live rank writes after the fork. A freed block
    the live rank reuses (the previous step's temporaries) is such a page, copied for the checkpoint
    although it holds nothing it needs; returned to the OS first, it comes back to the live rank as
    a fresh page and costs the checkpoint nothing. Values are untouched (determinism)."""
    if _malloc_trim[0] is None:
        try:
            _malloc_trim[0] = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):  # not glibc: nothing to trim
            _malloc_trim[0] = False
    if _malloc_trim[0]:
        _malloc_trim[0](0)


_malloc_trim: list[Any] = [None]


def _tell_keeper(request: dict[str, Any], message: dict[str, Any]) -> socket.socket | None:
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        control.connect(request["keeper"])
        send_message(control, message)
    except OSError:
        control.close()
        return None
    return control


def _serve(channel: Any, request: dict[str, Any]) -> None:
    """The checkpoint's life: sleep on the control socket; each ``resume`` forks a resumed rank.

    Its lifelines: the control socket (the coordinator's end closing ends it), and, once the rank
    it was forked from has ended and the zygote (a child subreaper) has adopted it, the zygote
    itself (``PR_SET_PDEATHSIG``, set as soon as the adoption is seen)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # resumed ranks are reaped automatically
    lead_own_session()  # not the rank's: the rank's session ends with the rank, a checkpoint outlives it
    _children.clear()
    with contextlib.suppress(OSError):
        channel.sock.close()
    hello = {"kind": "checkpoint", "rank": channel.rank, "token": request["token"], "pid": real_pid()}
    control = _tell_keeper(request, hello)
    if control is None:
        os._exit(0)
    adopted = False
    while True:
        readable, _, _ = select.select([control], [], [], LIFELINE_CHECK_S)
        if not readable:
            adopted = _check_lifeline(adopted)
            continue
        try:
            command = receive_message(control)
        except (ChannelClosed, OSError, ValueError):
            os._exit(0)
        if command.get("kind") != "resume":
            os._exit(0)  # "discard", or anything unexpected: a checkpoint never guesses
        if _fork() == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            lead_own_session()  # a rank: what it starts is ended with it
            _reconnect(channel, command)
            return


LIFELINE_CHECK_S = 1.0
"""How often a sleeping checkpoint looks whether it was orphaned (select's timeout: real time)."""


def _check_lifeline(adopted: bool) -> bool:
    parent = real_parent_pid()
    if parent == 1:
        os._exit(0)  # no zygote to adopt us: it died, and so must we
    if not adopted and _zygote_pid[0] and parent == _zygote_pid[0]:
        die_with_parent()
        if real_parent_pid() != _zygote_pid[0]:
            os._exit(0)
        return True
    return adopted


def _reconnect(channel: Any, command: dict[str, Any]) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if command.get("cwd"):
            # the execution this rank resumes into has its own working directory: two executions
            # resumed from one checkpoint (a divergence search's two sides) never share files
            os.chdir(command["cwd"])
            working_directory_moved(command["cwd"])
        sock.connect(command["socket"])
    except OSError:
        os._exit(0)
    channel.sock = sock
    adopt_this_process()  # os.getpid() names this process now: the rank's logical pid
    send_message(
        sock,
        {"kind": "hello", "rank": channel.rank, "pid": real_pid(), "t_ns": 0, "resumed": command["token"]},
    )
