"""Findings: the failing seeds of a database, bucketed by failure signature.

A bucket is one (scenario, signature). For each it reports how many seeds fail that way, which
fault kinds co-occur with it (the share of the bucket's seeds that had each kind, next to the
share of all that scenario's seeds, so a kind present in every failure but in few passes
stands out), the earliest-failing seed (the one whose failure comes first in simulated time,
the least to replay; ties go to fewer events, then the lower seed) and the exact command that
opens it: its recording when there is one, else ``timetravel run`` with every ``--set`` the
sweep used.

A database is untrusted input: the ``--scenario MODULE:ATTR`` a sweep stored is never put in a
command meant to be pasted (pasting it would import that module); it is reported on its own as
``scenario_target``, for the user to check before they pass it themselves. Likewise a torch sweep's
``script=PATH``: a pasted command would run that file, so the commands say ``script=SCRIPT`` (name
your script) and the stored path is reported on its own as ``scripts``.

``compare_to_baseline`` is the CI gate: the signatures found here that the baseline lacks.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from timetravel.farm.database import FindingsDatabase, Sweep
from timetravel.sim.runner import reproduce_command

BUCKET_SEEDS_SHOWN_MAX = 20
OPENER_DEFAULT = "inspect"
"""The first seeds of each bucket listed in ``--json`` (the count covers all of them)."""


@dataclass
class Bucket:
    scenario: str
    signature: str
    count: int
    share: float
    """Fraction of the scenario's seeds in this database that fail with this signature."""
    failure_kind: str
    fault_kinds: dict[str, dict[str, float]]
    earliest: dict[str, Any]
    open_command: str
    reproduce_command: str
    seeds: list[int] = field(default_factory=list)
    scenario_target: str | None = None
    """The ``--scenario MODULE:ATTR`` the database says the sweep ran with: untrusted, so shown on
    its own and never inside ``open_command`` or ``reproduce_command``."""
    scripts: list[str] = field(default_factory=list)
    """The scripts (``script=PATH``) the database says the sweep ran: untrusted code, shown on its
    own; the commands say ``script=SCRIPT`` instead."""


@dataclass
class Findings:
    db: str
    seeds: int
    failing: int
    scenarios: dict[str, int]
    buckets: list[Bucket]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def open_command(
    scenario: str, seed: int, sweep: Sweep | None, recording: str | None, opener: str = OPENER_DEFAULT
) -> str:
    """The command that opens a seed: ``timetravel OPENER RECORDING`` when it was recorded, else a run.

    ``opener`` is the front end that opens recordings (the CLI passes the best one it has: the
    TUI, the shell, or ``inspect``, which shows the world where the run ended). Never with the
    database's ``--scenario`` (see the module docstring).
    """
    if not recording:
        return run_command(scenario, seed, sweep)
    return shlex.join(["timetravel", opener, recording])


SCRIPT_PLACEHOLDER = "script=SCRIPT"
"""What a pasteable command says where the database names a script (the user names their own)."""


def run_command(scenario: str, seed: int, sweep: Sweep | None) -> str:
    """``timetravel run`` with the sweep's settings (never the database's ``--scenario``, and never a
    script path it names: ``script=SCRIPT``)."""
    settings = sweep.settings if sweep is not None else ()
    pasteable = [SCRIPT_PLACEHOLDER if setting.startswith("script=") else setting for setting in settings]
    return reproduce_command(scenario, seed, pasteable)


def named_scripts(sweep: Sweep | None) -> list[str]:
    """The scripts the database says the sweep ran (untrusted: see the module docstring)."""
    settings = sweep.settings if sweep is not None else ()
    return [setting.partition("=")[2] for setting in settings if setting.startswith("script=")]


def list_findings(database: FindingsDatabase, opener: str = OPENER_DEFAULT) -> Findings:
    """Every bucket of the database, the largest first."""
    connection = database.connection
    sweeps = database.sweeps()
    scenarios = dict(connection.execute("SELECT scenario, count(*) FROM seeds GROUP BY scenario ORDER BY 1"))
    kinds_overall = _fault_kind_counts(database, "outcome IS NOT NULL", ())
    buckets = []
    for scenario, signature, failure_kind, count in connection.execute(
        "SELECT scenario, signature, min(failure_kind), count(*) FROM seeds WHERE signature IS NOT NULL "
        "GROUP BY scenario, signature ORDER BY count(*) DESC, scenario, signature"
    ).fetchall():
        buckets.append(
            _bucket(
                database, sweeps, (scenario, signature, failure_kind, count), scenarios, kinds_overall, opener
            )
        )
    failing = sum(bucket.count for bucket in buckets)
    return Findings(str(database.path), sum(scenarios.values()), failing, scenarios, buckets)


def _bucket(
    database: FindingsDatabase,
    sweeps: dict[tuple[str, str], Sweep],
    key: tuple[str, str, str, int],
    scenarios: dict[str, int],
    kinds_overall: dict[tuple[str, str], int],
    opener: str,
) -> Bucket:
    scenario, signature, failure_kind, count = key
    where = "scenario = ? AND signature = ?"
    connection = database.connection
    seed, config, t_ns, events, recording = connection.execute(
        f"SELECT seed, config_hash, t_ns, events, recording FROM seeds WHERE {where} "
        "ORDER BY t_ns IS NULL, t_ns, events, seed LIMIT 1",
        (scenario, signature),
    ).fetchone()
    seeds = [
        row[0]
        for row in connection.execute(
            f"SELECT seed FROM seeds WHERE {where} ORDER BY seed LIMIT {BUCKET_SEEDS_SHOWN_MAX}",
            (scenario, signature),
        )
    ]
    in_bucket = _fault_kind_counts(database, where, (scenario, signature))
    total = scenarios[scenario]
    fault_kinds = {
        kind: {
            "seeds": seeds_with_kind,
            "share": round(seeds_with_kind / count, 4),
            "share_all": round(kinds_overall.get((scenario, kind), 0) / total, 4),
        }
        for (_, kind), seeds_with_kind in sorted(in_bucket.items(), key=lambda item: (-item[1], item[0]))
    }
    sweep = sweeps.get((scenario, config))
    return Bucket(
        scenario=scenario,
        signature=signature,
        count=count,
        share=round(count / total, 4),
        failure_kind=failure_kind,
        fault_kinds=fault_kinds,
        earliest={
            "seed": seed,
            "config_hash": config,
            "t_ns": t_ns,
            "events": events,
            "recording": recording,
        },
        open_command=open_command(scenario, seed, sweep, recording, opener),
        reproduce_command=run_command(scenario, seed, sweep),
        seeds=seeds,
        scenario_target=sweep.scenario_target if sweep is not None else None,
        scripts=named_scripts(sweep),
    )


def _fault_kind_counts(
    database: FindingsDatabase, where: str, parameters: tuple[Any, ...]
) -> dict[tuple[str, str], int]:
    """(scenario, fault kind) -> how many seeds matching ``where`` had that kind."""
    rows = database.connection.execute(
        f"SELECT scenario, kind.value, count(*) FROM seeds, json_each(seeds.fault_kinds) AS kind "
        f"WHERE {where} GROUP BY scenario, kind.value",
        parameters,
    )
    return {(scenario, kind): count for scenario, kind, count in rows}


@dataclass
class BaselineComparison:
    baseline: str
    new: list[dict[str, Any]]
    gone: list[dict[str, Any]]
    kept: int


def compare_to_baseline(findings: Findings, baseline: Findings) -> BaselineComparison:
    """Signatures (per scenario) found now but not in the baseline, and the ones that went away."""
    now = {(bucket.scenario, bucket.signature): bucket for bucket in findings.buckets}
    before = {(bucket.scenario, bucket.signature): bucket for bucket in baseline.buckets}
    new = [_brief(now[key]) for key in now if key not in before]
    gone = [_brief(before[key]) for key in before if key not in now]
    return BaselineComparison(baseline.db, new, gone, sum(1 for key in now if key in before))


def _brief(bucket: Bucket) -> dict[str, Any]:
    return {
        "scenario": bucket.scenario,
        "signature": bucket.signature,
        "count": bucket.count,
        "earliest_seed": bucket.earliest["seed"],
        "open_command": bucket.open_command,
    }


def find_bucket(findings: Findings, signature: str) -> list[Bucket]:
    """The buckets whose signature is ``signature``, or else starts with it (a unique prefix will do)."""
    exact = [bucket for bucket in findings.buckets if bucket.signature == signature]
    if exact:
        return exact
    return [bucket for bucket in findings.buckets if bucket.signature.startswith(signature)]
