"""The scenario registry: built-ins by name, plugins through the ``timetravel.scenarios`` entry points.

Loading a scenario by name never imports code that a recording names: built-ins live in this
package and entry points are code the user installed. Anything else must be asked for explicitly
with ``module:attr`` (``--scenario`` on the command line), which is the user's opt-in.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from timetravel.sim.scenario import Scenario

ENTRY_POINT_GROUP = "timetravel.scenarios"
_BUILTINS = {
    "pingpong": "timetravel.scenarios.pingpong:SCENARIO",
    "gossip": "timetravel.scenarios.gossip:SCENARIO",
    "needle": "timetravel.scenarios.needle:SCENARIO",
    "leaky": "timetravel.scenarios.leaky:SCENARIO",
    "dp_training": "timetravel.scenarios.dp_training:SCENARIO",
    "rdma_fork": "timetravel.scenarios.rdma_fork:SCENARIO",
    "torch": "timetravel.torch.world.scenario:SCENARIO",
}


class UnknownScenarioError(LookupError):
    """No scenario has that name; the message lists the known ones."""


def _plugin_targets() -> dict[str, str]:
    return {entry.name: entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)}


def register_builtin(name: str, target: str) -> None:
    """Register a built-in scenario by ``module:attr`` (used by timetravel's own packages)."""
    _BUILTINS[name] = target


def scenario_names() -> list[str]:
    """Every scenario that loads by name: built-ins first, then plugins."""
    plugins = [name for name in sorted(_plugin_targets()) if name not in _BUILTINS]
    return [*_BUILTINS, *plugins]


def load_target(target: str) -> Scenario:
    """Import ``module:attr`` and check that it is a Scenario (the caller vouches for the module)."""
    module_name, separator, attribute = target.partition(":")
    if not separator or not module_name or not attribute:
        raise UnknownScenarioError(f"scenario target must look like module:attr, got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UnknownScenarioError(f"cannot import scenario module {module_name!r}: {error}") from None
    scenario = getattr(module, attribute, None)
    if not isinstance(scenario, Scenario):
        raise UnknownScenarioError(f"{target} is not a timetravel Scenario")
    return scenario


def get_scenario(name: str) -> Scenario:
    """The scenario registered as ``name`` (a built-in or an installed plugin)."""
    target = _BUILTINS.get(name) or _plugin_targets().get(name)
    if target is None:
        raise UnknownScenarioError(f"unknown scenario {name!r} (known: {', '.join(scenario_names())})")
    scenario = load_target(target)
    if scenario.name != name:
        raise UnknownScenarioError(f"{target} is registered as {name!r} but calls itself {scenario.name!r}")
    return scenario


__all__ = ["ENTRY_POINT_GROUP", "UnknownScenarioError", "get_scenario", "load_target", "scenario_names"]
