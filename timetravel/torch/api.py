"""``timetravel.torch.simulate``: run a Python function as N simulated ranks and get the run back.

The function must be importable by name (a module-level function of an importable module: each rank
is a fresh process forked from the zygote, which imports it as torchrun would import a script), takes
no arguments and reads its rank from ``torch.distributed`` as a script does. Its return value, made
plain data (a tensor becomes a list), is each rank's entry in :attr:`TorchRun.returns`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TorchRun:
    """The outcome of one simulated run."""

    outcome: str
    failure: dict[str, Any] | None
    returns: list[Any]
    seed: int
    report: dict[str, Any] = field(repr=False)

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    def reproduce(self) -> str:
        """The Python call that reruns this seed."""
        settings = self.report["config"]
        return (
            f"timetravel.torch.simulate({settings['function']}, nproc={settings['nproc']}, seed={self.seed})"
        )


def function_target(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", "")
    if not module or "<locals>" in qualname or (module == "__main__" and not qualname):
        raise ValueError(f"{function!r} is not importable by name: define it at module level")
    return f"{module}:{qualname}"


def simulate(function: Callable[..., Any], nproc: int = 2, seed: int = 0, **settings: Any) -> TorchRun:
    """Run ``function`` as ``nproc`` ranks under the World with ``seed`` and torch scenario ``settings``."""
    from timetravel.scenarios import get_scenario
    from timetravel.sim.runner import run_report
    from timetravel.torch.world.specs import launch_naming_function

    target = function_target(function)
    scenario = get_scenario("torch")
    config = scenario.resolve_config({"function": target, "nproc": nproc, "rank_output": "quiet", **settings})
    report, world = run_report(scenario, config, seed, launch=launch_naming_function(target))
    returns_by_rank = world.nodes["c10d"].get("returns", {})
    returns = [returns_by_rank.get(str(rank)) for rank in range(config["nproc"] * config["nnodes"])]
    return TorchRun(report["outcome"], report["failure"], returns, seed, report)
