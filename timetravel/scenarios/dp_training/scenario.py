"""The dp_training Scenario object: schema, build, handlers, end-of-run check and summary."""

from __future__ import annotations

import dataclasses
from typing import Any

from timetravel import fabric
from timetravel.scenarios.dp_training import allreduce, elastic, monitor, pipeline, resend, watchdog
from timetravel.scenarios.dp_training.build import (
    ROLE_CONTROLLER,
    ROLE_MONITOR,
    ROLE_RANK,
    ROLE_STORAGE,
    SCENARIO_NAME,
    build,
)
from timetravel.scenarios.dp_training.detectors import weights_digest
from timetravel.scenarios.dp_training.model import layout_for
from timetravel.scenarios.dp_training.params import DEMO_SEED, PARAMS, PRESETS
from timetravel.sim import Param, Scenario, ScenarioView, World


def summarize(world: World) -> dict[str, Any]:
    """``summary`` of ``run --json``: rank 0's view of the job, and counts over every rank where one
    rank can differ from the others (a rank that skipped a step alone is the planted bug's trace)."""
    rank = world.nodes["r0"]
    skipped = _skipped_by_rank(world)
    skipped_steps = max([rank["skipped_steps"], *skipped.values()])
    return {
        "steps": rank["step"],
        "final_loss": rank["loss"],
        "weights_hash": f"{weights_digest(rank['weights']):016x}",
        "params": layout_for(world.config["params"]).params,
        "ranks": world.config["ranks"],
        "allreduce": world.config["allreduce"],
        "skipped_steps": skipped_steps,
        "skipped_alone": skipped,
        "divergence_checks_passed": world.nodes[monitor.NAME]["checks_passed"],
        "restarts": world.nodes[elastic.CONTROLLER]["restarts"],
        "resends": sum(
            world.nodes[monitor.rank_name(index)]["resends"] for index in range(world.config["ranks"])
        ),
        "faults": _fault_counts(world),
    }


def _skipped_by_rank(world: World) -> dict[str, int]:
    """Steps skipped by each rank whose count differs from most ranks' (rank order); empty when
    every rank skipped alike, as the step guard means them to."""
    counts = {
        name: world.nodes[name]["skipped_steps"] for name, role in world.roles.items() if role == ROLE_RANK
    }
    values = list(counts.values())
    usual = max(values, key=values.count) if values else 0
    return {name: count for name, count in counts.items() if count != usual}


def _fault_counts(world: World) -> dict[str, int]:
    """Fault records by kind, and how many took effect (``timetravel faults`` lists the schedule)."""
    counts: dict[str, int] = {"records": 0, "hit": 0}
    for fault in fabric.summary(world)["faults"]:
        counts["records"] += 1
        counts["hit"] += fault["hits"] > 0
        counts[fault["kind"]] = counts.get(fault["kind"], 0) + 1
    return counts


def _params_with_presets() -> tuple[Param, ...]:
    choices = ("none", *PRESETS)
    return tuple(
        dataclasses.replace(param, choices=choices) if param.name == "preset" else param for param in PARAMS
    )


SCENARIO = Scenario(
    name=SCENARIO_NAME,
    summary="data-parallel training over ring/tree/naive all-reduce, with replica, hang and oracle detectors",
    params=_params_with_presets(),
    build=build,
    handlers=fabric.with_handlers(
        {
            ROLE_RANK: {
                **pipeline.HANDLERS,
                **allreduce.HANDLERS,
                **watchdog.HANDLERS,
                **resend.HANDLERS,
                **elastic.RANK_HANDLERS,
            },
            ROLE_MONITOR: monitor.HANDLERS,
            ROLE_CONTROLLER: elastic.CONTROLLER_HANDLERS,
            ROLE_STORAGE: elastic.STORAGE_HANDLERS,
        },
        elastic.HOOKS,
    ),
    transport=fabric.transport,
    presets=PRESETS,
    preset_seeds={"demo": DEMO_SEED},
    on_end=monitor.on_end,
    summarize=summarize,
    determinism="forbid",
    view=ScenarioView(
        rank_role=ROLE_RANK,
        step_key="step",
        collective_seq_key="coll_seq",
        progress_key="progress_ns",
        weight_key="weights",
        fault_states=fabric.VIEW_STATES,
    ),
)
