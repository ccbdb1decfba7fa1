"""A minimizer candidate the scenario refuses (fewer ranks than its fault schedule names) is a
candidate that does not reproduce, not the end of the minimization."""

from __future__ import annotations

import dataclasses
import json

from fabric_example import SCENARIO

from timetravel.explore.minimize import minimize
from timetravel.sim import Param

SHRINKABLE = dataclasses.replace(
    SCENARIO,
    params=tuple(
        Param("ranks", "int", 8, "GPUs", minimum=2, shrinkable=True) if param.name == "ranks" else param
        for param in SCENARIO.params
    ),
)


def test_shrinking_ranks_stops_at_the_last_rank_a_fault_names() -> None:
    faults = [
        {
            "kind": "corrupt",
            "target": "r3",
            "t_start": "100us",
            "params": {"buffer": "weights", "bit": 30, "element": 5},
        }
    ]
    config = SHRINKABLE.resolve_config([f"faults={json.dumps(faults)}"])
    result = minimize(SHRINKABLE, config, 0)
    assert result.signature == "divergence:example.end"
    assert result.config["ranks"] == 4
    assert result.params_changed["ranks"] == (8, 4)
