"""The monitor: the test harness's observer of the job, home of the cross-rank detectors.

It is a node (``monitor``) so that its state is world data like everything else, but it is not
part of the simulated job: it uses no network, and it reads rank states without ever writing them.

* ``divergence``: on every ``check_every``-th step (and the last), each rank reports a digest of
  its weights; once all have reported, any rank whose digest differs from the majority's fails the
  run, named.
* ``oracle`` (``oracle=on``): every rank's digest after every step must equal the fault-free
  reference's (:mod:`reference`, computed once per config and cached), bit for bit.
* ``hang``: when no rank has completed a step for ``hang_timeout``, the run fails with a
  flight-recorder table (as PyTorch's NCCL flight recorder dumps): per rank, its phase, the last
  collective it entered and completed, and whom it waits on. A rank's own watchdog
  (:mod:`watchdog`) raises the suspicion once its collective has waited ``hang_timeout`` (as
  NCCL's timeout counts from a collective's start); the monitor then fails the run if no rank has
  completed a step for ``hang_timeout`` either, or rechecks exactly when that will be true. If the event queue drains with ranks short of
  their last step (nothing left that could make progress), that is a hang too, reported then.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from timetravel.scenarios.dp_training import allreduce, collective_level
from timetravel.scenarios.dp_training.params import collective_level as at_collective_level
from timetravel.sim import Context, Event, World
from timetravel.sim.timefmt import format_time

NAME = "monitor"
RECHECK = "recheck"
DIVERGENCE_SITE = "dp_training.divergence"
ORACLE_SITE = "dp_training.oracle"
HANG_SITE = "dp_training.hang"
END_SITE = "dp_training.end"
TALLIES_MAX = 64
"""Open divergence checks at once; ranks are at most a step or two apart, so a few suffice."""
FLIGHT_RECORDER_ROWS_SHOWN = 16
"""Rows of the flight recorder printed in the failure message (the full table is in the record)."""
DIVERGENT_RANKS_SHOWN = 8
RESTART_PHASES = ("down", "joining", "restoring")


def rank_name(index: int) -> str:
    return f"r{index}"


def initial_state(config: dict[str, Any], expected: list[int] | None) -> dict[str, Any]:
    return {"expected": expected, "tallies": {}, "checks_passed": 0, "recheck_ns": -1}


def on_observe(state: dict[str, Any], event: Event, ctx: Context) -> None:
    index, generation, step, digest = event[4]
    config = ctx.world.config
    expected = state["expected"]
    if expected is not None and digest != expected[step - 1]:
        ctx.fail(
            "oracle",
            f"r{index}'s weights after step {step} differ from the fault-free run's "
            f"(digest {digest:016x}, expected {expected[step - 1]:016x})",
            site=ORACLE_SITE,
            node=rank_name(index),
        )
        return
    if step % config["check_every"] == 0 or step == config["steps"]:
        _tally(state, ctx, index, generation, step, digest)


def _tally(state: dict[str, Any], ctx: Context, index: int, generation: int, step: int, digest: int) -> None:
    tallies = state["tallies"]
    key = f"{generation}:{step}"
    tally = tallies.get(key)
    if tally is None:
        _forget_older_generations(tallies, generation)
        if len(tallies) >= TALLIES_MAX:
            ctx.fail("assertion", f"more than {TALLIES_MAX} divergence checks open at once", site=END_SITE)
            return
        ranks = ctx.world.config["ranks"]
        tally = tallies[key] = {"digests": [None] * ranks, "count": 0}
    if tally["digests"][index] is None:
        tally["count"] += 1
    tally["digests"][index] = digest
    if tally["count"] == len(tally["digests"]):
        del tallies[key]
        _compare(state, ctx, step, tally["digests"])


def _forget_older_generations(tallies: dict[str, Any], generation: int) -> None:
    """An elastic restart abandoned the checks of older generations: ranks will never finish them."""
    for key in [key for key in tallies if int(key.partition(":")[0]) < generation]:
        del tallies[key]


def _compare(state: dict[str, Any], ctx: Context, step: int, digests: list[int]) -> None:
    counts = Counter(digests)
    if len(counts) == 1:
        state["checks_passed"] += 1
        return
    majority = max(counts, key=lambda digest: (counts[digest], -digests.index(digest)))
    if counts[majority] == 1:
        ctx.fail(
            "divergence",
            f"replicas diverged by step {step}: all {len(digests)} ranks hold different weights",
            site=DIVERGENCE_SITE,
            node=rank_name(0),
        )
        return
    odd = [rank for rank, digest in enumerate(digests) if digest != majority]
    shown = ", ".join(rank_name(rank) for rank in odd[:DIVERGENT_RANKS_SHOWN])
    more = f" and {len(odd) - DIVERGENT_RANKS_SHOWN} more" if len(odd) > DIVERGENT_RANKS_SHOWN else ""
    ctx.fail(
        "divergence",
        f"replicas diverged by step {step}: {shown}{more} hold weights that differ from the other "
        f"{counts[majority]} ranks' ({len(counts)} distinct checksums)",
        site=DIVERGENCE_SITE,
        node=rank_name(odd[0]),
    )


def on_suspect(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A rank's watchdog saw its collective outlive ``hang_timeout``: is the whole job stuck?"""
    _check_hang(state, ctx)


def on_recheck(state: dict[str, Any], event: Event, ctx: Context) -> None:
    if event[4] == state["recheck_ns"]:
        state["recheck_ns"] = -1
        _check_hang(state, ctx)


def _check_hang(state: dict[str, Any], ctx: Context) -> None:
    """Fail at last progress + hang_timeout; until then wait (one pending recheck at most)."""
    world = ctx.world
    nodes = world.nodes
    last_progress_ns = 0
    all_done = True
    for index in range(world.config["ranks"]):
        rank = nodes[rank_name(index)]
        if rank["progress_ns"] > last_progress_ns:
            last_progress_ns = rank["progress_ns"]
        if rank["phase"] != "done":
            all_done = False
    if all_done:
        return
    deadline_ns = last_progress_ns + world.config["hang_timeout"]
    if ctx.now >= deadline_ns:
        _report_hang(ctx, last_progress_ns)
    elif state["recheck_ns"] < 0:
        state["recheck_ns"] = deadline_ns
        ctx.timer(deadline_ns - ctx.now, RECHECK, deadline_ns)


def flight_recorder(world: World) -> list[dict[str, Any]]:
    """Per rank: phase, step, last collective entered and completed, whom it waits on, and how far
    it got in its current collective (ring steps, tree chunks, ranks heard)."""
    algorithm = world.config["allreduce"]
    level_waits = collective_level.waits_on(world) if at_collective_level(world.config) else None
    rows = []
    for index in range(world.config["ranks"]):
        name = rank_name(index)
        rank = world.nodes[name]
        down = name in world.down
        if level_waits is not None:
            waits = level_waits.get(collective_level.key_of(rank), []) if rank["coll_active"] else []
            progress = int(rank["coll_active"] and collective_level.entered(world, rank))
        else:
            waits = [] if down else allreduce.waits_on(algorithm, rank)
            progress = 0 if down else allreduce.progress(algorithm, rank)
        rows.append(
            {
                "rank": name,
                "phase": "down" if down else rank["phase"],
                "step": rank["step"],
                "entered": [rank["coll_seq"], rank["coll_step"], rank["coll_entered_ns"]],
                "completed": [rank["coll_done_seq"], rank["coll_done_step"], rank["coll_done_ns"]],
                "waits_on": [] if down else waits,
                "progress": 0 if down else progress,
            }
        )
    return rows


def format_flight_recorder(rows: list[dict[str, Any]], unit: str = "ms") -> list[str]:
    """Text rows for a failure message: stuck ranks first, bounded."""

    def when(t_ns: int) -> str:
        return format_time(t_ns, unit) if t_ns >= 0 else "-"

    ordered = sorted(rows, key=lambda row: (not row["waits_on"], row["completed"][0]))
    lines = [
        "rank    phase      step  entered(seq,step,t)        completed(seq,step,t)      progress  waits on"
    ]
    for row in ordered[:FLIGHT_RECORDER_ROWS_SHOWN]:
        entered = f"#{row['entered'][0]} s{row['entered'][1]} {when(row['entered'][2])}"
        completed = f"#{row['completed'][0]} s{row['completed'][1]} {when(row['completed'][2])}"
        lines.append(
            f"{row['rank']:<7} {row['phase']:<9} {row['step']:>5}  {entered:<26} {completed:<26} "
            f"{row['progress']:>8}  {','.join(row['waits_on']) or '-'}"
        )
    if len(rows) > FLIGHT_RECORDER_ROWS_SHOWN:
        lines.append(
            f"... {len(rows) - FLIGHT_RECORDER_ROWS_SHOWN} more ranks (the full table is in the failure record)"
        )
    return lines


def _phase_of(rows: list[dict[str, Any]], rank: str | None) -> str:
    return next((row["phase"] for row in rows if row["rank"] == rank), "?")


def wait_root(rows: list[dict[str, Any]]) -> tuple[str | None, str]:
    """The rank to look at first, and why.

    ``end``: a rank that is waited on yet not itself waiting (down, or outside the collective):
    the end of the chain of waits, which counting waiters would not find (in a ring every blocked
    rank waits on its predecessor). ``cycle``: every waited-on rank waits too, as when a message
    was lost for good or a link is cut; then the rank that got least far in its collective, where
    the flow stopped first. Ties go to the lowest rank.
    """
    waits = {row["rank"]: row["waits_on"] for row in rows}
    waited = Counter(name for row in rows for name in row["waits_on"])
    if not waited:
        return None, "none"
    ends = [name for name in waited if not waits.get(name)]
    if ends:
        return min(ends, key=lambda name: int(name[1:])), "end"
    progress = {row["rank"]: row["progress"] for row in rows}
    return min(waited, key=lambda name: (progress[name], int(name[1:]))), "cycle"


def _report_hang(ctx: Context, last_progress_ns: int, drained: bool = False) -> None:
    world = ctx.world
    rows = flight_recorder(world)
    culprit, why = wait_root(rows)
    blocked = sum(1 for row in rows if row["waits_on"])
    phases = Counter(row["phase"] for row in rows)
    if culprit is None:
        restarting = [row["rank"] for row in rows if row["phase"] in RESTART_PHASES]
        culprit = restarting[0] if restarting else None
        why = "restart" if restarting else "none"
    stalled = (
        "nothing is left to run"
        if drained
        else f"no rank completed a step for {format_time(world.config['hang_timeout'])}"
    )
    head = (
        f"{stalled} (last progress at {format_time(last_progress_ns)}); {blocked} ranks wait in a collective"
        + f" (phases: {', '.join(f'{count} {phase}' for phase, count in sorted(phases.items()))})"
        + {
            "end": f"; the waits lead to {culprit}",
            "cycle": f"; the waits form a cycle (a message lost for good, or a cut link): {culprit} got least far",
            "restart": f"; an elastic restart did not complete: {culprit} is {_phase_of(rows, culprit)}",
            "none": "",
        }[why]
    )
    ctx.fail("hang", "\n".join([head, *format_flight_recorder(rows)]), site=HANG_SITE, node=culprit)
    world.failures[-1]["flight_recorder"] = rows


def on_end(world: World, ctx: Context) -> None:
    """The queue drained: every rank must have finished, else nothing can ever move again (a hang)."""
    steps = world.config["steps"]
    stuck = [
        index for index in range(world.config["ranks"]) if world.nodes[rank_name(index)]["step"] != steps
    ]
    if not stuck:
        return
    last_progress_ns = max(
        world.nodes[rank_name(index)]["progress_ns"] for index in range(world.config["ranks"])
    )
    _report_hang(ctx, last_progress_ns, drained=True)


HANDLERS = {"observe": on_observe, "suspect": on_suspect, RECHECK: on_recheck}
