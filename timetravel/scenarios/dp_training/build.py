"""Build the initial world: N ranks with their model replicas and data shards, the monitor, the
elastic controller and checkpoint storage, all on the fabric (``fabric.install``).

Everything a rank needs at run time is in its node state, decided here once: its neighbours in the
ring and the tree (so the hot message handlers do no arithmetic on names), its compute time from
the FLOP model, its replica of the initial weights, its optimizer slots and its data shard.
"""

from __future__ import annotations

from typing import Any

from timetravel import fabric
from timetravel.scenarios.dp_training import collective, device, elastic, monitor, reference, ring, tree
from timetravel.scenarios.dp_training.data import build_dataset
from timetravel.scenarios.dp_training.model import layout_for
from timetravel.scenarios.dp_training.numerics import DTYPES, pin_blas_threads
from timetravel.scenarios.dp_training.optimizer import initial_slots
from timetravel.scenarios.dp_training.params import check_config, compute_time_ns
from timetravel.scenarios.dp_training.pipeline import STEP_START
from timetravel.sim import World

SCENARIO_NAME = "dp_training"
ROLE_RANK = "rank"
ROLE_MONITOR = "monitor"
ROLE_CONTROLLER = "controller"
ROLE_STORAGE = "storage"


def rank_state(config: dict[str, Any], index: int, weights: Any, inputs: Any, targets: Any) -> dict[str, Any]:
    """The initial state of rank ``index`` (plain data and numpy arrays only)."""
    ranks = config["ranks"]
    parent = tree.parent_of(index)
    return {
        "index": index,
        "ranks": ranks,
        "generation": 0,
        "step": 0,
        "phase": "idle",
        "compute_ns": compute_time_ns(config),
        "next": monitor.rank_name((index + 1) % ranks),
        "prev": monitor.rank_name((index - 1) % ranks),
        "tree_parent": monitor.rank_name(parent) if parent is not None else None,
        "tree_children": [monitor.rank_name(child) for child in tree.children_of(index, ranks)],
        "weights": weights.astype(DTYPES[config["dtype"]]),
        "slots": initial_slots(config["optimizer"], weights.shape[0]),
        "bucket": None,
        "staging": None,
        "grad_pending": None,
        "inputs": inputs,
        "targets": targets,
        "loss": None,
        "loss_local": None,
        "grad_norm": None,
        "skip_local": False,
        "last_applied": False,
        "skipped_steps": 0,
        "step_started_ns": -1,
        "step_ns": 0,
        "progress_ns": 0,
        "incarnation": 0,
        "crashes": 0,
        "restores": 0,
        "elastic_token": 0,
        "elastic_since_ns": 0,
        **collective.initial_state(),
        **ring.initial_state(ranks, config["bug"]),
    }


def build(config: dict[str, Any], seed: int) -> World:
    check_config(config)
    pin_blas_threads()
    layout = layout_for(config["params"])
    dataset = build_dataset(
        config["data_seed"], config["ranks"], config["batch"], config["batches_per_rank"], layout
    )
    world = World(SCENARIO_NAME, config, seed)
    ranks = [monitor.rank_name(index) for index in range(config["ranks"])]
    for index, name in enumerate(ranks):
        state = rank_state(
            config, index, dataset.initial_weights, dataset.inputs[index], dataset.targets[index]
        )
        world.add_node(name, ROLE_RANK, state)
    expected = list(reference.reference(config).digests) if config["oracle"] else None
    world.add_node(monitor.NAME, ROLE_MONITOR, monitor.initial_state(config, expected))
    world.add_node(elastic.CONTROLLER, ROLE_CONTROLLER, elastic.controller_state(config["ranks"]))
    first = world.nodes[ranks[0]]
    world.add_node(elastic.STORAGE, ROLE_STORAGE, elastic.storage_state(first["weights"], first["slots"]))
    fabric.install(world, ranks, hooks=elastic.HOOKS, buffers=device.BUFFERS)
    for index in range(config["ranks"]):
        world.schedule(0, monitor.rank_name(index), STEP_START, 0)
    return world
