"""The cross-process nondeterminism detector behind ``timetravel check-determinism``.

The guard (``timetravel.sim.guard``) makes clocks and entropy deterministic inside handlers; what
it cannot see — iteration order of sets under hash randomization, state kept in module globals,
anything read from the host — shows up as two processes disagreeing on the same seed. This package
runs each seed in fresh interpreters with different PYTHONHASHSEED values, compares their hash
chains, and for each mismatch names the first divergent event and diffs the node states there.

Layer: above ``scenarios/`` (workers load scenarios by name), below ``cli/``.
"""

from timetravel.determinism.checker import (
    PROCESSES_DEFAULT,
    RUNS_PER_SEED_DEFAULT,
    SeedRangeError,
    check_determinism,
    parse_seed_range,
)
from timetravel.determinism.processes import WORKER_TIMEOUT_S_DEFAULT, CheckError
from timetravel.determinism.trace import RunSpec

__all__ = [
    "PROCESSES_DEFAULT",
    "RUNS_PER_SEED_DEFAULT",
    "WORKER_TIMEOUT_S_DEFAULT",
    "CheckError",
    "RunSpec",
    "SeedRangeError",
    "check_determinism",
    "parse_seed_range",
]
