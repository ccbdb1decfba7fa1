"""The deterministic simulation kernel: time, events, choices, the World and the run loop.

Everything a scenario author needs is exported here, once.
"""

from timetravel.sim.choices import choose_world
from timetravel.sim.context import Context, freeze
from timetravel.sim.encoding import check_plain
from timetravel.sim.event import Event
from timetravel.sim.failure import make_failure
from timetravel.sim.guard import DeterminismError
from timetravel.sim.kernel import RunResult, Simulation, chain_head
from timetravel.sim.scenario import ConfigError, Param, Scenario, ScenarioView
from timetravel.sim.timefmt import TimeFormatError, format_time, format_time_auto, parse_time
from timetravel.sim.world import World

__all__ = [
    "ConfigError",
    "Context",
    "DeterminismError",
    "Event",
    "Param",
    "RunResult",
    "Scenario",
    "ScenarioView",
    "Simulation",
    "TimeFormatError",
    "World",
    "chain_head",
    "check_plain",
    "choose_world",
    "format_time",
    "format_time_auto",
    "freeze",
    "make_failure",
    "parse_time",
]
