"""The node ``c10d``: the simulated backend as plain data — matching, checking, reducing, timing.

State (all plain data and numpy arrays, so snapshots and diffs see it):

* ``ops[key]`` — a collective in flight, ``key = "<group>#<seq>"`` (``p2p:<group>:<src>><dst>:<tag>#<n>``
  for a send/recv pair): the entries of the members that entered so far;
* ``results["<rank>:<work id>"]`` — what a rank will receive and when (``t_ns``), until it waits;
* ``waiting[rank]`` — the works a blocked rank waits for and since when;
* ``flight[rank]`` — the flight recorder: the rank's last collectives, entered and completed;
* ``steps[step][rank]`` — parameter digests after an optimizer step, until every rank reported;
* ``last[rank]`` — the rank's last collective: digests and non-finite counts of its inputs and outputs
  (:mod:`timetravel.torch.world.digests`: where a NaN entered).

What c10d decides for the live rank processes — release result N to rank r, kill rank r, restart
every rank — it records as data, in ``orders`` (orders.py); the rank nodes' side carries the
orders out after the handler, through the run's host, and removes them (ranks.py ``obeying``).
c10d never touches a process.

Detectors here: ``collective_mismatch``, ``nan``, ``exception``/``crash`` (how a rank ended), ``divergence``
(:mod:`timetravel.torch.world.replicas`) and ``hang`` (:mod:`timetravel.torch.world.hangs`).
"""

from __future__ import annotations

from typing import Any

import xxhash

from timetravel.sim.context import Context
from timetravel.sim.encoding import pack_for_hash
from timetravel.sim.event import Event
from timetravel.torch.protocol import arrays
from timetravel.torch.world import (
    collectives,
    digests,
    duplicates,
    elastic,
    faults,
    hangs,
    replicas,
    resume,
    silent,
    store,
)
from timetravel.torch.world import state as training_state
from timetravel.torch.world.orders import ORDERS_KEY
from timetravel.torch.world.timing import collective_done_ns, point_to_point_done_ns


def initial_state(ranks: int, script_sha256: str) -> dict[str, Any]:
    return {
        "ranks": ranks,
        "script_sha256": script_sha256,
        "ops": {},
        "results": {},
        "waiting": {},
        "exited": {},
        "flight": {str(rank): [] for rank in range(ranks)},
        "steps": {},
        "completed": 0,
        "steps_checked": 0,
        "restarts": 0,
        "incarnation": 0,
        "deliveries": {},
        "delivering": {},
        "received": {},
    }


# -- calls --------------------------------------------------------------------------------------


def on_call(state: dict[str, Any], event: Event, ctx: Context) -> None:
    message = event.payload
    if not _arrived(state, message):
        return
    rank = message["rank"]
    if str(message.get("op", "")).startswith("store."):
        ctx.deliver(ctx.now, store.STORE_NODE, "request", message)  # the rendezvous store: its own node
        return
    # the sender's outbox (ranks._post_inputs): read here, copied into c10d's own entry; the call
    # message says each tensor's digest and non-finite count
    inputs = list(ctx.world.nodes[f"r{rank}"]["outbox"][str(message["id"])])
    summary = [[described[2], described[3]] for described in message["inputs"]]
    op = message["op"]
    members = [int(member) for member in message["members"]]
    if rank not in members:
        ctx.fail(
            "exception",
            f"r{rank} called {op} on a group it is not a member of",
            "torch.collective.membership",
            node=f"r{rank}",
        )
        return
    entry = {
        "rank": rank,
        "index": members.index(rank),
        "op": op,
        "inputs": inputs,
        "summary": summary,
        "opts": dict(message["opts"]),
        "id": message["id"],
        "t_ns": ctx.now,
        "expect": message.get("expect", []),
        "timeout_ns": message.get("timeout_ns"),
    }
    if _apply_entry_faults(entry, ctx):
        return
    key = (
        f"p2p:{message['pair']}#{message['seq']}"
        if op in ("send", "recv")
        else f"{message['group']}#{message['seq']}"
    )
    digests.note_entry(state, entry, key, message["group"], message["seq"])
    hangs.check_deadlines(state, ctx)
    if op in ("send", "recv"):
        _enter_point_to_point(state, entry, message, ctx)
        return
    if op not in collectives.COLLECTIVE_OPS:
        ctx.fail("unsupported", f"unsupported {op}", f"torch.collective.unsupported.{op}", node=f"r{rank}")
        return
    key = f"{message['group']}#{message['seq']}"
    record = state["ops"].setdefault(key, {"members": members, "entries": {}, "group": message["group"]})
    record["entries"][str(rank)] = entry
    hangs.flight_enter(state, rank, key, entry)
    if len(record["entries"]) == len(members) and not _fails_on_nonfinite(record, key, ctx):
        _complete(state, key, ctx)


def _apply_entry_faults(entry: dict[str, Any], ctx: Context) -> bool:
    """Delay, crash, drop or corrupt this rank's entry as its faults say; True when it never arrives."""
    fate, record = faults.at_entry(ctx, entry)
    if fate == "crashed":
        assert record is not None
        rank = entry["rank"]
        ctx.state.setdefault(ORDERS_KEY, []).append(["kill", rank])
        text = f"r{rank} crashed (fault {record['id']}) entering {entry['op']}"
        elastic.rank_failed(ctx.state, ctx, rank, "crash", text, "torch.fault.crash")
    return fate != "arrives"


def _fails_on_nonfinite(record: dict[str, Any], key: str, ctx: Context) -> bool:
    """The ``nan`` detector, once every member entered collective ``key``: a NaN or Inf in any
    member's input fails the run naming every rank that fed one (digests.fail_nonfinite), not only
    the first to arrive. A collective that never completes is told as a nan by the hang check."""
    entries = list(record["entries"].values())
    if not ctx.world.config["detect_nan"] or not any("nonfinite" in entry for entry in entries):
        return False
    _group, _, seq = key.rpartition("#")
    digests.fail_nonfinite(entries, key, record["group"], int(seq) if seq.isdigit() else seq, ctx)
    return True


def _complete(state: dict[str, Any], key: str, ctx: Context) -> None:
    record = state["ops"][key]
    members = record["members"]
    entries = [record["entries"][str(rank)] for rank in members]
    # by the run's host: it journals the outputs when recorded, and a replay reads them back
    done = ctx.processes.complete(ctx.event, entries, len(members), ctx.world.config["reduce_order"])
    received = None if done.outputs is None else [done.outputs[entry["index"]] for entry in entries]
    heal, received = faults.at_completion(ctx, members, entries, received)
    if heal is None:
        record["held_by_partition"] = True
        return  # split for ever: nobody completes (the hang detector names who waits)
    state["ops"].pop(key)
    if done.disagreement is not None:
        _fail_mismatch(key, done.disagreement, ctx)
        return
    if done.unsupported is not None or received is None:
        ctx.fail(
            "unsupported",
            str(done.unsupported),
            "torch.collective.unsupported",
            node=f"r{entries[0]['rank']}",
        )
        return
    entered_ns = [entry["t_ns"] for entry in entries]
    if heal is not False:  # a partition that heals: nobody's data crosses it before then
        entered_ns = [max(time, int(heal)) for time in entered_ns]
    t_done = collective_done_ns(ctx.world.fabric, entries[0]["op"], members, entered_ns, done.payload_bytes)
    _finish(state, entries, received, t_done, ctx, key)
    state["completed"] += 1


def _fail_mismatch(key: str, disagreement: tuple[dict[str, Any], dict[str, Any]], ctx: Context) -> None:
    odd, usual = disagreement
    detail = odd.get("problem") or (
        f"r{odd['rank']} called {collectives.describe(odd)} where r{usual['rank']} called {collectives.describe(usual)}"
    )
    ctx.fail(
        "collective_mismatch",
        f"collective {key}: {detail}",
        "torch.collective.mismatch",
        node=f"r{odd['rank']}",
    )
    ctx.world.failures[-1].update(
        collective=key, odd=collectives.describe(odd), usual=collectives.describe(usual)
    )


def _finish(
    state: dict[str, Any],
    entries: list[dict[str, Any]],
    received: list[list[Any]],
    t_done: int,
    ctx: Context,
    key: str | None = None,
) -> None:
    """Store what each rank receives (after any result fault) and release it now to a rank that waits;
    then compare what the members of group collective ``key`` received where they must agree (a
    difference fails the run ``divergence`` here: world/replicas.py)."""
    out_digests = digests.note_results(state, entries, received, t_done, ctx)
    for entry, outputs in zip(entries, received, strict=True):
        rank = entry["rank"]
        # the arrays themselves (read-only, shared with the entries they came from): a recording
        # keeps their digests only, and the wire sends their bytes (arrays.out_of_band)
        state["results"][f"{rank}:{entry['id']}"] = {"t_ns": t_done, "outputs": list(outputs)}
        for flight in state["flight"][str(rank)]:
            if flight["id"] == entry["id"]:
                flight["state"] = "completed"
                flight["t_done_ns"] = t_done
        if state["waiting"].get(str(rank)) is not None:
            _try_release(state, rank, ctx)
    if key is not None and ctx.world.config["detect_divergence"]:
        replicas.check_received(state, entries, received, out_digests, key, ctx)


def _enter_point_to_point(
    state: dict[str, Any], entry: dict[str, Any], message: dict[str, Any], ctx: Context
) -> None:
    key = f"p2p:{message['pair']}#{message['seq']}"
    record = state["ops"].setdefault(key, {"members": [], "entries": {}, "group": message["group"]})
    record["entries"][entry["op"]] = entry
    hangs.flight_enter(state, entry["rank"], key, entry)
    if len(record["entries"]) < 2 or _fails_on_nonfinite(record, key, ctx):
        return
    state["ops"].pop(key)
    sender, receiver = record["entries"]["send"], record["entries"]["recv"]
    if _shapes_differ(sender, receiver):
        sent = [[arrays.dtype_name(array), list(array.shape)] for array in sender["inputs"]]
        ctx.fail(
            "collective_mismatch",
            f"r{sender['rank']} sent {sent} to r{receiver['rank']}, which expected {receiver['expect']}",
            "torch.collective.p2p_mismatch",
            node=f"r{sender['rank']}",
        )
        return
    nbytes = collectives.payload_bytes(sender)
    t_done = point_to_point_done_ns(
        ctx.world.fabric, sender["rank"], receiver["rank"], max(sender["t_ns"], receiver["t_ns"]), nbytes
    )
    _heal, received = faults.at_completion(ctx, None, [sender, receiver], [[], list(sender["inputs"])])
    assert received is not None
    _finish(state, [sender, receiver], received, t_done, ctx)
    state["completed"] += 1


def _shapes_differ(sender: dict[str, Any], receiver: dict[str, Any]) -> bool:
    sent = [(arrays.dtype_name(array), list(array.shape)) for array in sender["inputs"]]
    expected = [(name, list(shape)) for name, shape in receiver["expect"]]
    return sent != expected


# -- waits and releases ---------------------------------------------------------------------------


def _arrived(state: dict[str, Any], message: dict[str, Any]) -> bool:
    """Whether ``message`` comes from the rank's live incarnation (False: a dead rank's leftover,
    ignored). If it does, the rank called again: the result it was being handed has arrived."""
    if not elastic.current(state, message):
        return False
    state["delivering"].pop(str(message["rank"]), None)
    return True


def on_wait(state: dict[str, Any], event: Event, ctx: Context) -> None:
    message = event.payload
    if not _arrived(state, message):
        return
    rank = message["rank"]
    waiting: dict[str, Any] = {"works": [int(work) for work in message["works"]], "since_ns": ctx.now}
    if message.get("timeout_ns") is not None:  # the script's timeout= for this group (or this wait)
        waiting["timeout_ns"] = int(message["timeout_ns"])
    if message.get("store"):  # a store call: its own timeout answers it (world/store.py)
        waiting["store"] = True
    state["waiting"][str(rank)] = waiting
    _try_release(state, rank, ctx)
    if str(rank) in state["waiting"]:
        hangs.arm_deadline(state, ctx)


def _try_release(state: dict[str, Any], rank: int, ctx: Context) -> None:
    waiting = state["waiting"][str(rank)]
    keys = [f"{rank}:{work}" for work in waiting["works"]]
    if not all(key in state["results"] for key in keys):
        return
    del state["waiting"][str(rank)]
    results = {key.split(":")[1]: state["results"].pop(key) for key in keys}
    t_release = max([ctx.now, *(result["t_ns"] for result in results.values())])
    state["deliveries"][str(rank)] = number = state["deliveries"].get(str(rank), 0) + 1
    message = {
        "kind": "result",
        "t_ns": t_release,
        "results": {work: result["outputs"] for work, result in results.items()},
    }
    # kept here until the rank's next call shows it arrived: a world restored before its poll
    # still holds it, for a rank resumed from a checkpoint (torch/checkpoints.py)
    state["delivering"][str(rank)] = {"number": number, "message": message}
    chain = state["received"].setdefault(str(rank), {})
    # over the hash form (arrays by their digests): the same chain whether a world holds the bytes
    chain[str(number)] = xxhash.xxh3_64_hexdigest(
        chain.get(str(number - 1), "").encode() + pack_for_hash(message)
    )
    chain.pop(str(number - 2), None)
    state.setdefault(ORDERS_KEY, []).append(["release", rank, number, message])
    poll = {"incarnation": state["incarnation"], "delivery": number}
    ctx.deliver(t_release, f"r{rank}", "poll", poll)


# -- steps, exits, hangs ----------------------------------------------------------------------------


def on_step(state: dict[str, Any], event: Event, ctx: Context) -> None:
    message = event.payload
    if not _arrived(state, message):
        return
    step = str(message["step"])
    reports = state["steps"].setdefault(step, {})
    reports[str(message["rank"])] = message["params"]
    training_state.collect_shards(state, message, state["ranks"] - len(state["exited"]), ctx)
    digests.step_done(state, message["rank"])
    digested = message["params"] + message.get("shard_params", [])
    resume.note_step(state, str(message["rank"]), digested, ctx)
    silent.note_step(state, str(message["rank"]), digested, ctx)
    if len(reports) < state["ranks"] - len(state["exited"]):
        return
    del state["steps"][step]
    state["steps_checked"] += 1
    if ctx.world.config["detect_divergence"]:
        replicas.check_step(step, reports, ctx)


RANK_ERROR_KINDS = ("unsupported", "internal", "oom")
"""How a rank's exception may be told apart from the script's own (rank/errors.py ``error_kind``)."""


def on_exit(state: dict[str, Any], event: Event, ctx: Context) -> None:
    message = event.payload
    if not _arrived(state, message):
        return
    rank = message["rank"]
    state["exited"][str(rank)] = int(message["code"])
    if "result" in message:
        state.setdefault("returns", {})[str(rank)] = message["result"]
    node = f"r{rank}"
    if message.get("error"):
        where = f" at {message['where']}" if message.get("where") else ""
        kind = message.get("error_kind") if message.get("error_kind") in RANK_ERROR_KINDS else "exception"
        error_type = str(message["error"]).split(":")[0]
        traceback = message.get("traceback", "")
        if kind == "internal":
            text = f"{INTERNAL_ERROR} in {node}: {message['error']}{where}. {INTERNAL_REQUEST}"
            elastic.rank_failed(
                state, ctx, rank, kind, text, f"torch.internal:{error_type}", traceback=traceback
            )
            return
        text = f"{node} raised {message['error']}{where}"
        if kind == "oom":
            text = f"{node} ran out of memory (its limit: the setting rank_memory_max): {message['error']}{where}"
        elastic.rank_failed(state, ctx, rank, kind, text, f"torch.script:{error_type}", traceback=traceback)
        return
    if message["code"] != 0:
        elastic.rank_failed(
            state, ctx, rank, "crash", f"{node} exited with code {message['code']}", "torch.rank.exit_code"
        )


INTERNAL_ERROR = "timetravel's own error (a bug of the simulator, not of your script)"
INTERNAL_REQUEST = (
    "Please report it to timetravel's developers with the traceback (--json: failure.traceback)"
)


def on_died(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A rank's channel closed without an exit message: it was killed, took a signal or os._exit-ed."""
    message = event.payload
    if not elastic.current(state, message):
        return
    rank = message["rank"]
    text = f"r{rank} died without a word (killed, a signal, or os._exit)"
    elastic.rank_failed(state, ctx, rank, "crash", text, "torch.rank.died")


def on_store_result(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """The store node answered a rank's store call: a result like a collective's, released on wait."""
    message = event.payload
    if not elastic.current(state, message):
        return  # a call of a rank process a restart has replaced
    rank = int(message["rank"])
    state["results"][f"{rank}:{message['id']}"] = {"t_ns": ctx.now, "outputs": message["outputs"]}
    if str(rank) in state["waiting"]:
        _try_release(state, rank, ctx)


def on_warning(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A rank did something that works here but bites on a real cluster (``fork_after_init``,
    ``duplicate_batches``: world/duplicates.py): the first of each name is kept for the summary;
    ``duplicate_batches`` fails the run under ``detect_duplicate_batches=fail``."""
    if not elastic.current(state, event.payload):
        return
    message = event.payload
    warnings = state.setdefault("warnings", {})
    name = str(message["name"])
    if name in warnings:
        return
    warnings[name] = {
        "first_rank": f"r{message['rank']}",
        "t_ns": ctx.now,
        "detail": message.get("detail", ""),
        **{key: message[key] for key in ("ranks", "step") if key in message},
    }
    ctx.log(f"warning {name} on r{message['rank']}")
    if name == duplicates.WARNING and ctx.world.config["detect_duplicate_batches"] == "fail":
        detail = str(message["detail"])
        ctx.fail("duplicate_batches", detail, "torch.data.duplicate_batches", node=f"r{message['rank']}")
        ctx.world.failures[-1].update(ranks=message["ranks"], step=message["step"])


NO_COLLECTIVES = "no_collectives"
NO_COLLECTIVES_DETAIL = "no rank called a collective: is this script distributed?"


def warn_if_never_distributed(state: dict[str, Any], ctx: Context) -> None:
    """At the end of a run that passed: no rank completed a collective or an optimizer step (a GPU
    script that took its no-GPU branch, a script that never called init_process_group's users)."""
    if state["completed"] == 0 and state["steps_checked"] == 0:
        state.setdefault("warnings", {})[NO_COLLECTIVES] = {
            "first_rank": None,
            "t_ns": ctx.now,
            "detail": NO_COLLECTIVES_DETAIL,
        }
        ctx.log(f"warning {NO_COLLECTIVES}: {NO_COLLECTIVES_DETAIL}")


HANDLERS = {
    "call": on_call,
    "wait": on_wait,
    "step": on_step,
    "exit": on_exit,
    "died": on_died,
    "warning": on_warning,
    "store_result": on_store_result,
    "deadline": hangs.on_deadline,
}
