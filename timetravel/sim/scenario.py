"""Scenarios: a name, a typed config schema, a function that builds the World, and handlers.

A scenario is code, and only code: everything it needs at run time lives in the World it builds.
Its config is a flat dict of typed values. Users set values from the command line with
``--set key=value`` (applied after any ``preset``); a wrong key or a value of the wrong type is
a :class:`ConfigError` whose one-line message names the key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from timetravel.sim.guard.state import MODE_DEFAULT, check_mode
from timetravel.sim.timefmt import TimeFormatError, parse_time

if TYPE_CHECKING:
    from timetravel.sim.context import Context, Transport
    from timetravel.sim.event import Event
    from timetravel.sim.launch import Launch
    from timetravel.sim.world import World

Handler = Callable[[dict[str, Any], "Event", "Context"], None]
PARAM_KINDS = ("int", "float", "str", "bool", "time", "json")
JSON_FILE_BYTES_MAX = 16 * 1024 * 1024
_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")


class ConfigError(ValueError):
    """A config key or value that the scenario does not accept; the message names the key."""


class NotAuthorizedError(ConfigError):
    """The world would run code the user did not name (a recording's script, a function target).

    Not a finding: the kernel lets it through a handler to the caller (a one-line error, exit 2)
    instead of recording it as the run's failure, because nothing of the user's code has run."""


@dataclass(frozen=True)
class Param:
    """One config key: its type, default and meaning.

    ``kind`` is one of int, float, str, bool, time (integer nanoseconds, written ``950ms``),
    json (plain data, inline or ``@file.json``). ``choices`` restricts a str. ``branchable``
    marks keys that a branch may change mid-run (e.g. a reduction order or ``bug=none``).
    ``shrinkable`` marks an int size (ranks, steps) that a minimizer may lower towards
    ``minimum`` to find a smaller world that still fails the same way.
    """

    name: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    branchable: bool = False
    maximum: float | None = None
    """The largest value that makes sense (checked before the world is built, so a typo such as
    nodes=10**26 is one error, not minutes of allocation)."""
    shrinkable: bool = False

    def __post_init__(self) -> None:
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"param {self.name}: kind must be one of {PARAM_KINDS}")
        if self.shrinkable and (self.kind != "int" or self.minimum is None):
            raise ValueError(f"param {self.name}: a shrinkable param is an int with a minimum")

    def parse(self, text: str) -> Any:
        """Read a command-line value for this key."""
        try:
            value = self._parse(text)
        except (ValueError, TimeFormatError) as error:
            raise ConfigError(f"config key {self.name!r}: {error}") from None
        return self.check(value)

    def _parse(self, text: str) -> Any:
        if self.kind == "int":
            return int(text.replace("_", ""))
        if self.kind == "float":
            return float(text)
        if self.kind == "bool":
            lowered = text.strip().lower()
            if lowered in _TRUE_WORDS:
                return True
            if lowered in _FALSE_WORDS:
                return False
            raise ValueError(f"expected a boolean (on/off), got {text!r}")
        if self.kind == "time":
            return parse_time(text)
        if self.kind == "json":
            return _parse_json_value(text)
        return text

    def check(self, value: Any) -> Any:
        """Check a typed value (from a preset or a parsed string) and return it."""
        expected: tuple[type, ...] = {
            "int": (int,),
            "time": (int,),
            "float": (float, int),
            "bool": (bool,),
            "str": (str,),
        }.get(self.kind, (object,))
        if isinstance(value, bool) and self.kind != "bool" and self.kind != "json":
            raise ConfigError(f"config key {self.name!r}: expected {self.kind}, got a boolean")
        if not isinstance(value, expected):
            raise ConfigError(f"config key {self.name!r}: expected {self.kind}, got {type(value).__name__}")
        if self.kind == "float" and isinstance(value, (int, float)):
            value = float(value)
        if self.choices and value not in self.choices:
            raise ConfigError(f"config key {self.name!r}: {value!r} is not one of {', '.join(self.choices)}")
        if self.minimum is not None and isinstance(value, (int, float)) and value < self.minimum:
            raise ConfigError(f"config key {self.name!r}: {value!r} is below the minimum {self.minimum}")
        if self.maximum is not None and isinstance(value, (int, float)) and value > self.maximum:
            raise ConfigError(f"config key {self.name!r}: {value!r} is above the maximum {self.maximum}")
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            raise ConfigError(f"config key {self.name!r}: {value!r} does not fit in 64 bits")
        return value


def _parse_json_value(text: str) -> Any:
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            if path.stat().st_size > JSON_FILE_BYTES_MAX:
                raise ValueError(f"{path} is larger than {JSON_FILE_BYTES_MAX} bytes")
            text = path.read_text()
        except OSError as error:
            raise ValueError(f"cannot read {path}: {error.strerror}") from None
    stripped = text.strip()
    if stripped[:1] in ("[", "{", '"') or stripped in ("null", "true", "false"):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as error:
            raise ValueError(f"invalid JSON: {error.msg} at position {error.pos}") from None
    return stripped


@dataclass(frozen=True)
class Scenario:
    """A built-in or user world. See the module docstring and docs/writing-a-scenario.md."""

    name: str
    summary: str
    params: tuple[Param, ...]
    build: Callable[[dict[str, Any], int], World]
    """``build(config, seed)``: the initial World, with its nodes and first events."""
    handlers: Mapping[str, Mapping[str, Handler]]
    """``handlers[role][event_kind]``."""
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    preset_seeds: Mapping[str, int] = field(default_factory=dict)
    """A preset's own default seed (``timetravel run`` uses it when ``--seed`` is not given): the
    seed a demo preset was made for, so that ``--set preset=demo`` alone reproduces the demo."""
    transport: Transport | None = None
    """How messages travel; None is the kernel's fixed latency (plus ``fabric.jitter_ns``)."""
    on_end: Callable[[World, Context], None] | None = None
    """Called once when the event queue drains: end-of-run oracles."""
    summarize: Callable[[World], dict[str, Any]] | None = None
    """Figures of the scenario's own for ``run --json`` (the ``summary`` object)."""
    display_unit: str = "ms"
    determinism: str = MODE_DEFAULT
    """The determinism guard's mode for this scenario's handlers: virtualize, forbid or off
    (``Simulation(determinism=...)`` and ``--determinism`` override it; docs/determinism.md)."""
    snapshot_every_events: int | None = None
    """The snapshot interval its recordings want by default (None: the recorder's 8192). A seek
    re-executes up to this many events; the torch scenario's events run user code, so it asks less."""
    snapshot_elide_bytes_min: int | None = None
    """Arrays of more bytes are stored in its recordings' snapshots as page digests only (elided:
    sim/elided.py), except in a run's final snapshot: for a world whose large arrays re-execution
    rebuilds (the torch scenario's tensors). None: every array's bytes are stored."""
    describe_divergence: Callable[[World, World, tuple[dict[str, Any], ...]], str | None] | None = None
    """The first divergence of two runs said in the scenario's own terms (the torch scenario: the
    collective, rank and tensor whose bits first differ), from the two worlds after the diverging
    event and their state changes; None, or returning None: the generic sentence only."""
    divergence_t_ns: Callable[[World, World, tuple[dict[str, Any], ...]], int | None] | None = None
    """When that first divergence happened in the scenario's own terms, if not at the diverging
    event's time (the torch scenario: the completion time ``t_done`` of the first collective whose
    results differ, later than the event that completed it); None, or returning None: the event's."""
    repro_setup: Callable[[dict[str, Any], Launch], tuple[str, str]] | None = None
    """For a repro pytest (explore/repro.py): module-level lines and one call inside the opened
    Session that the test needs before it re-executes (the torch scenario names its script)."""
    world_source: Callable[[Any], Any] | None = None
    """For scenarios whose worlds own external processes (explore/world_source.py): called as
    ``world_source(session)`` when a recording of this scenario is opened, it returns the object
    that restores the session's worlds and re-executes them. None (every plain-data scenario): the
    worlds are restored from the recording and re-executed by the kernel."""
    build_launched: Callable[[dict[str, Any], int, Launch], World] | None = None
    """For scenarios whose worlds run code the user names (the torch scenario): ``build`` with the
    user's :class:`~timetravel.sim.launch.Launch`, which says which file runs and whether it may;
    ``runner.build_world`` calls it when present (``build`` then means "with nothing launched")."""
    processes: Callable[[Launch], Any] | None = None
    """For scenarios whose worlds run external processes: ``processes(launch)`` makes the owner of one
    run's processes (the torch scenario's :class:`~timetravel.torch.world.host.RankHost`), from what
    the user launched (sim/launch.py). A Simulation given none makes its own and closes it when its
    run can go no further; a Session's world source hands its own to every Simulation it makes.
    Handlers reach it as ``ctx.processes`` (None for plain-data scenarios)."""

    def __post_init__(self) -> None:
        check_mode(self.determinism)
        unknown = [name for name in self.preset_seeds if name not in self.presets]
        if unknown:
            raise ValueError(f"scenario {self.name}: preset_seeds names unknown preset {unknown[0]!r}")

    def default_seed(self, config: Mapping[str, Any]) -> int:
        """The seed to run when none is given: the chosen preset's own seed, else 0."""
        return self.preset_seeds.get(config.get("preset") or "", 0)

    def param(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        known = ", ".join(sorted(p.name for p in self.params))
        raise ConfigError(f"unknown config key {name!r} for scenario {self.name} (known: {known})")

    def defaults(self) -> dict[str, Any]:
        return {param.name: param.default for param in self.params}

    def resolve_config(self, settings: Iterable[str] | Mapping[str, Any] = ()) -> dict[str, Any]:
        """Defaults, then the preset named in ``settings`` (if any), then ``settings`` in order.

        ``settings`` is either ``key=value`` strings from the command line or a mapping of
        already-typed values (from Python or a recording).
        """
        pairs = list(_settings_pairs(self, settings))
        config = self.defaults()
        for name, value in pairs:
            if name == "preset":
                config.update(self._preset(value))
                config["preset"] = value
        for name, value in pairs:
            if name != "preset":
                config[name] = value
        return config

    def _preset(self, name: Any) -> Mapping[str, Any]:
        if name in ("", "none", None):
            return {}
        if name not in self.presets:
            raise ConfigError(
                f"unknown preset {name!r} for scenario {self.name} (known: {', '.join(self.presets)})"
            )
        return {key: self.param(key).check(value) for key, value in self.presets[name].items()}


def _settings_pairs(
    scenario: Scenario, settings: Iterable[str] | Mapping[str, Any]
) -> Iterable[tuple[str, Any]]:
    if isinstance(settings, Mapping):
        for name, value in settings.items():
            yield name, scenario.param(name).check(value)
        return
    for setting in settings:
        name, separator, text = setting.partition("=")
        if not separator or not name:
            raise ConfigError(f"--set expects key=value, got {setting!r}")
        yield name.strip(), scenario.param(name.strip()).parse(text)
