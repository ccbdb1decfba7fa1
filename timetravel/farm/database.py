"""The findings database: one SQLite file, one row per seed, written by one process.

Only the sweep's parent process writes (workers return rows to it), in WAL mode, one transaction
per finished seed. So a killed worker can never leave half a row, a reader (``timetravel
findings`` in another terminal) never blocks the sweep, and a seed counts as done exactly when
its row is committed: an interrupted sweep resumes by skipping the rows it finds. The primary
key (scenario, config hash, seed) makes a second commit of the same seed a no-op, so a seed is
never counted twice, even by two sweeps racing on one file.

Tables: ``meta`` (the schema version), ``sweeps`` (one row per scenario and config: the ``--set``
strings that produced it, so a finding can print the exact command that reopens it) and
``seeds``. SQLite's WAL needs shared memory, so the file must live on a local disk (not NFS);
docs/farm.md shows how shards on a cluster write locally and merge.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from timetravel.farm.job import ROW_FIELDS, check_row
from timetravel.recording.files import check_output_path, make_parent_folders

SCHEMA_VERSION = "timetravel.findings/1"
BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for another writer's transaction before giving up."""
CONFLICTS_SHOWN_MAX = 20
DEFAULT_DATABASE = "recordings/findings.db"
COMPARED_COLUMNS = (  # the columns two rows of one seed must agree on
    "outcome",
    "failure_kind",
    "signature",
    "fault_kinds",
    "t_ns",
    "events",
    "state_hash",
    "code_fingerprint",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sweeps (
    scenario TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    settings TEXT NOT NULL,
    config TEXT NOT NULL,
    scenario_target TEXT,
    swarm INTEGER NOT NULL,
    PRIMARY KEY (scenario, config_hash)
);
CREATE TABLE IF NOT EXISTS seeds (
    scenario TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    seed INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    failure_kind TEXT,
    signature TEXT,
    failure_node TEXT,
    failure_message TEXT,
    fault_kinds TEXT NOT NULL,
    t_ns INTEGER,
    events INTEGER,
    state_hash TEXT,
    wall_s REAL NOT NULL,
    attempts INTEGER NOT NULL,
    recording TEXT,
    code_fingerprint TEXT NOT NULL,
    version TEXT NOT NULL,
    PRIMARY KEY (scenario, config_hash, seed)
);
CREATE INDEX IF NOT EXISTS seeds_by_signature ON seeds (signature, scenario);
"""


class FindingsDatabaseError(ValueError):
    """A file that is not a findings database (or a corrupt one); the message names it."""


@dataclass(frozen=True)
class Sweep:
    """One (scenario, config) that seeds were run with, and how the user asked for it."""

    scenario: str
    config_hash: str
    settings: tuple[str, ...]
    config: dict[str, Any]
    scenario_target: str | None
    swarm: bool


SCENARIO_TARGET_CHARS_SHOWN = 200


@dataclass(frozen=True)
class MergeResult:
    """What a merge added and what it found where both databases had a row of the same seed."""

    inserted: int
    duplicates: int
    conflicts_total: int
    conflicts: list[dict[str, Any]]
    """Examples (at most CONFLICTS_SHOWN_MAX): scenario, seed and ``differs`` {column: [kept, other]}."""
    other_code: int
    other_code_changed: int
    scenario_targets: list[str] = field(default_factory=list)
    """The ``MODULE:ATTR`` values the input's sweeps name: copied as data and shown, never imported
    (``verify`` imports only the ``--scenario`` its user passes)."""


class FindingsDatabase:
    """An open findings database. ``create=False`` refuses to make a new file."""

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if not create and not self.path.exists():
            raise FileNotFoundError(f"no findings database at {self.path} (run `timetravel fuzz` first)")
        if self.path.is_dir():
            raise IsADirectoryError(f"{self.path} is a directory, not a findings database")
        check_output_path(self.path)  # a FIFO or device would block sqlite or feed it garbage
        if create:
            make_parent_folders(self.path)
        try:
            self.connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except sqlite3.DatabaseError as error:
            raise FindingsDatabaseError(f"{self.path} is not a findings database ({error})") from None
        try:
            self._prepare(create)
        except sqlite3.DatabaseError as error:
            self.connection.close()
            raise FindingsDatabaseError(f"{self.path} is not a findings database ({error})") from None
        except BaseException:
            self.connection.close()
            raise

    def _prepare(self, create: bool) -> None:
        connection = self.connection
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise FindingsDatabaseError(f"{self.path} is an SQLite file but not a findings database")
        if not tables and not create:  # an empty file (or database) is no sweep's: it is read, never made one
            what = "an empty file" if self.path.stat().st_size == 0 else "an SQLite file with no tables"
            raise FindingsDatabaseError(
                f"{self.path} is {what}, not a findings database (run `timetravel fuzz` first)"
            )
        if "meta" in tables:
            found = connection.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if found is None or found[0] != SCHEMA_VERSION:
                version = found[0] if found else "none"
                raise FindingsDatabaseError(
                    f"{self.path} has findings schema {version!r}; this timetravel reads {SCHEMA_VERSION!r}"
                )
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        if "meta" not in tables:
            connection.executescript(
                f"BEGIN IMMEDIATE; {_SCHEMA} INSERT OR IGNORE INTO meta VALUES ('schema', '{SCHEMA_VERSION}'); COMMIT;"
            )

    def transaction(self) -> Any:
        return _Transaction(self.connection)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> FindingsDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sweeps ---------------------------------------------------------------------------------

    def add_sweep(self, sweep: Sweep) -> None:
        """Remember how a config was asked for (the first spelling of its settings wins)."""
        with self.transaction():
            self.connection.execute(
                "INSERT OR IGNORE INTO sweeps VALUES (?, ?, ?, ?, ?, ?)",
                (
                    sweep.scenario,
                    sweep.config_hash,
                    json.dumps(list(sweep.settings)),
                    json.dumps(sweep.config, sort_keys=True),
                    sweep.scenario_target,
                    int(sweep.swarm),
                ),
            )

    def sweeps(self) -> dict[tuple[str, str], Sweep]:
        found = {}
        for scenario, hash_, settings, config, target, swarm in self.connection.execute(
            "SELECT * FROM sweeps ORDER BY scenario, config_hash"
        ):
            found[(scenario, hash_)] = Sweep(
                scenario, hash_, tuple(json.loads(settings)), json.loads(config), target, bool(swarm)
            )
        return found

    # -- seeds ----------------------------------------------------------------------------------

    def done_seeds(self, scenario: str, config_hash: str) -> set[int]:
        cursor = self.connection.execute(
            "SELECT seed FROM seeds WHERE scenario = ? AND config_hash = ?", (scenario, config_hash)
        )
        return {row[0] for row in cursor}

    def other_code_rows(self, scenario: str, config_hash: str, code_fingerprint: str) -> int:
        """How many done rows of this sweep were run by other code (a resume after an edit)."""
        row = self.connection.execute(
            "SELECT count(*) FROM seeds WHERE scenario = ? AND config_hash = ? AND code_fingerprint != ?",
            (scenario, config_hash, code_fingerprint),
        ).fetchone()
        return int(row[0])

    def add_row(self, row: dict[str, Any]) -> bool:
        """Commit one seed's row in its own transaction; False when the seed was already done."""
        check_row(row)
        values = [json.dumps(row[name]) if name == "fault_kinds" else row[name] for name in ROW_FIELDS]
        with self.transaction():
            cursor = self.connection.execute(
                f"INSERT OR IGNORE INTO seeds ({', '.join(ROW_FIELDS)}) VALUES ({', '.join('?' * len(ROW_FIELDS))})",
                values,
            )
        return cursor.rowcount == 1

    def set_recording(self, scenario: str, config_hash: str, seed: int, path: str) -> None:
        with self.transaction():
            self.connection.execute(
                "UPDATE seeds SET recording = ? WHERE scenario = ? AND config_hash = ? AND seed = ?",
                (path, scenario, config_hash, seed),
            )

    def rows(self, where: str = "", parameters: tuple[Any, ...] = ()) -> Iterator[dict[str, Any]]:
        """Rows as dicts (``fault_kinds`` decoded), ordered by scenario, config and seed."""
        query = f"SELECT {', '.join(ROW_FIELDS)} FROM seeds {where} ORDER BY scenario, config_hash, seed"
        for values in self.connection.execute(query, parameters):
            row = dict(zip(ROW_FIELDS, values, strict=True))
            row["fault_kinds"] = json.loads(row["fault_kinds"])
            yield row

    def count(self) -> int:
        return int(self.connection.execute("SELECT count(*) FROM seeds").fetchone()[0])

    # -- merging --------------------------------------------------------------------------------

    def merge_from(self, source_path: str | Path) -> MergeResult:
        """Copy another database's sweeps and rows in; a seed already here keeps its row.

        Where both hold a row of one seed, the rows are compared on everything but wall time,
        attempts and recording. Rows from other code (another code fingerprint) are counted as
        ``other_code``, and as ``other_code_changed`` when their results differ: the code changed
        the answer. Rows from the *same* code with different results are a **conflict**: a
        determinism bug (or another platform), which the caller should treat as an error.
        """
        FindingsDatabase(source_path, create=False).close()
        connection = self.connection
        connection.execute("ATTACH DATABASE ? AS source", (str(source_path),))
        try:
            with self.transaction():
                comparison = self._compare_with_source()
                before = self.count()
                connection.execute("INSERT OR IGNORE INTO sweeps SELECT * FROM source.sweeps")
                columns = ", ".join(ROW_FIELDS)
                connection.execute(
                    f"INSERT OR IGNORE INTO seeds ({columns}) SELECT {columns} FROM source.seeds"
                )
                inserted = self.count() - before
                total = connection.execute("SELECT count(*) FROM source.seeds").fetchone()[0]
                targets = [
                    str(row[0])[:SCENARIO_TARGET_CHARS_SHOWN]
                    for row in connection.execute(
                        "SELECT DISTINCT scenario_target FROM source.sweeps WHERE scenario_target IS NOT NULL "
                        f"ORDER BY scenario_target LIMIT {CONFLICTS_SHOWN_MAX}"
                    )
                ]
        finally:
            connection.execute("DETACH DATABASE source")
        return MergeResult(
            inserted=inserted, duplicates=int(total) - inserted, **comparison, scenario_targets=targets
        )

    def _compare_with_source(self) -> dict[str, Any]:
        results = [column for column in COMPARED_COLUMNS if column != "code_fingerprint"]
        results_differ = " OR ".join(f"mine.{column} IS NOT theirs.{column}" for column in results)
        other_code = "mine.code_fingerprint IS NOT theirs.code_fingerprint"
        join = (
            "FROM main.seeds AS mine JOIN source.seeds AS theirs "
            "ON mine.scenario = theirs.scenario AND mine.config_hash = theirs.config_hash "
            "AND mine.seed = theirs.seed"
        )

        def count(condition: str) -> int:
            return int(self.connection.execute(f"SELECT count(*) {join} WHERE {condition}").fetchone()[0])

        def examples(condition: str) -> list[dict[str, Any]]:
            selected = ", ".join(f"mine.{column}, theirs.{column}" for column in results)
            found = []
            for values in self.connection.execute(
                f"SELECT mine.scenario, mine.seed, {selected} {join} WHERE {condition} "
                f"ORDER BY mine.scenario, mine.seed LIMIT {CONFLICTS_SHOWN_MAX}"
            ):
                pairs = dict(zip(results, zip(values[2::2], values[3::2], strict=True), strict=True))
                differing = {column: list(pair) for column, pair in pairs.items() if pair[0] != pair[1]}
                found.append({"scenario": values[0], "seed": values[1], "differs": differing})
            return found

        conflict = f"NOT ({other_code}) AND ({results_differ})"
        return {
            "conflicts_total": count(conflict),
            "conflicts": examples(conflict),
            "other_code": count(other_code),
            "other_code_changed": count(f"({other_code}) AND ({results_differ})"),
        }


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on an exception) on an autocommit connection."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def __enter__(self) -> None:
        self.connection.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.connection.execute("ROLLBACK" if exc_type is not None else "COMMIT")
