"""Scenarios: a name, a typed config schema, a function that builds the World, and handlers.

A scenario is code, and only code: everything it needs at run time lives in the World it builds.
Its config is a flat dict of typed values. Users set values from the command line with
``--set key=value`` (applied after any ``preset``); a wrong key or a value of the wrong type is
a :class:`ConfigError` whose one-line message names the key.

Every value is checked when it is set, before any world is built, whether it comes from the
command line, a preset, a recording or Python (``Param.check``): of its kind (a float is finite, a
time is not negative unless its Param says so, an int fits in 64 bits), in the Param's range, one
of its choices, and through the Param's own ``validate`` (a fault schedule's shape). A json value is
plain data nested at most JSON_DEPTH_MAX deep, with finite numbers; ``@FILE`` reads a regular file
of at most JSON_FILE_BYTES_MAX bytes, and only where files are allowed (not in settings that come
from a findings database: ``Scenario.resolve_config(..., files=False)``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from timetravel.sim.guard.state import MODE_DEFAULT, check_mode
from timetravel.sim.regular_files import read_regular
from timetravel.sim.timefmt import TimeFormatError, parse_time

if TYPE_CHECKING:
    from timetravel.sim.context import Context, Transport
    from timetravel.sim.event import Event
    from timetravel.sim.launch import Launch
    from timetravel.sim.world import World

Handler = Callable[[dict[str, Any], "Event", "Context"], None]
PARAM_KINDS = ("int", "float", "str", "bool", "time", "json")
JSON_FILE_BYTES_MAX = 16 * 1024 * 1024
JSON_DEPTH_MAX = 32
"""A json setting nests lists and maps at most this deep (a fault schedule needs 3)."""
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
    validate: Callable[[Any], object] | None = None
    """The scenario's own check of a value beyond its kind and range (a fault schedule's shape):
    raises ValueError naming what is wrong; run whenever the value is set, before any world."""

    def __post_init__(self) -> None:
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"param {self.name}: kind must be one of {PARAM_KINDS}")
        if self.shrinkable and (self.kind != "int" or self.minimum is None):
            raise ValueError(f"param {self.name}: a shrinkable param is an int with a minimum")

    def parse(self, text: str, *, files: bool = True) -> Any:
        """Read a command-line value for this key (``files``: may a json value be ``@FILE``)."""
        try:
            value = self._parse(text, files)
        except (ValueError, TimeFormatError) as error:
            raise ConfigError(f"config key {self.name!r}: {error}") from None
        return self.check(value)

    def names_file(self, text: str) -> bool:
        """True when ``text`` set on this key would read a file (a json ``@FILE``)."""
        return self.kind == "json" and text.startswith("@")

    def _parse(self, text: str, files: bool) -> Any:
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
            if self.names_file(text) and not files:
                raise ValueError(
                    f"{text!r} names a file, which a setting from a findings database may not "
                    f"(--set {self.name}=... replaces it)"
                )
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
        if self.kind == "float":
            value = _finite_float(self.name, value)
        if self.kind == "json":
            _check_plain(self.name, value)
        if self.choices and value not in self.choices:
            raise ConfigError(f"config key {self.name!r}: {value!r} is not one of {', '.join(self.choices)}")
        minimum = self.minimum if self.minimum is not None or self.kind != "time" else 0
        if minimum is not None and isinstance(value, (int, float)) and value < minimum:
            unit = " ns" if self.kind == "time" else ""
            raise ConfigError(
                f"config key {self.name!r}: {value!r}{unit} is below the minimum {minimum}{unit}"
            )
        if self.maximum is not None and isinstance(value, (int, float)) and value > self.maximum:
            raise ConfigError(f"config key {self.name!r}: {value!r} is above the maximum {self.maximum}")
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            raise ConfigError(f"config key {self.name!r}: {value!r} does not fit in 64 bits")
        if self.validate is not None:
            try:
                self.validate(value)
            except ValueError as error:
                raise ConfigError(f"config key {self.name!r}: {error}") from None
        return value


def _finite_float(name: str, value: Any) -> float:
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(f"config key {name!r}: {value!r} is not a finite number")
    return number


def _check_plain(name: str, value: Any) -> None:
    """A json value: lists, maps with string keys and scalars, at most JSON_DEPTH_MAX deep, every
    float finite (walked without recursion, so no depth can overflow the stack)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(f"config key {name!r}: {item!r} is not a finite number")
        if isinstance(item, (list, dict)):
            if depth >= JSON_DEPTH_MAX:
                raise ConfigError(f"config key {name!r}: nested more than {JSON_DEPTH_MAX} deep")
            if isinstance(item, dict):
                if not all(isinstance(key, str) for key in item):
                    raise ConfigError(f"config key {name!r}: a map's keys must be strings")
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)


def _parse_json_value(text: str) -> Any:
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = read_regular(path, JSON_FILE_BYTES_MAX).decode()
        except OSError as error:  # not found, not allowed, not a regular file (a FIFO, /dev/zero)
            raise ValueError(
                f"cannot read {path}: {error.strerror}" if error.strerror else str(error)
            ) from None
        except UnicodeDecodeError:
            raise ValueError(f"{path} is not UTF-8 text") from None
    stripped = text.strip()
    if stripped[:1] in ("[", "{", '"') or stripped in ("null", "true", "false"):
        try:
            return json.loads(stripped, parse_constant=_refuse_constant)
        except json.JSONDecodeError as error:
            raise ValueError(f"invalid JSON: {error.msg} at position {error.pos}") from None
        except RecursionError:
            raise ValueError(f"JSON nested more than {JSON_DEPTH_MAX} deep") from None
    return stripped


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number (JSON has none)")


FAULT_VIEW_STATES = ("slow", "partitioned")
"""The conditions a fault's target can be shown in (the TUI's rank states with a fault behind them)."""


@dataclass(frozen=True)
class ScenarioView:
    """What a front end reads in this scenario's worlds (the TUI's rank grid and timeline), declared by
    the scenario: the TUI looks up these keys and nothing else. Each ``*_key`` is a key of a rank's
    node state, ``""`` where the scenario keeps no such value (the grid then shows none)."""

    rank_role: str = ""
    """The role of the nodes the rank grid shows; "": the role most nodes have (every node when no
    role is shared)."""
    step_key: str = ""
    """A rank's progress as a count: its training step, round, messages received."""
    collective_seq_key: str = ""
    """How many collectives the rank has entered."""
    progress_key: str = ""
    """When the rank last made progress (integer ns)."""
    weight_key: str = ""
    """A numpy array of the rank's weights: a rank whose weights differ from the majority's is diverged."""
    status_key: str = ""
    """A rank state the scenario sets itself (one of the TUI's rank states, e.g. ``crashed``)."""
    waiting_key: str = ""
    """Whom the rank waits on, as text (``r2,r3``)."""
    collectives_role: str = ""
    """The role of a node that keeps each rank's last collective as ``last/<rank index>/seq``, for a
    scenario whose rank nodes keep no count of their own (the torch scenario's ``c10d``)."""
    loss_metric: str = "loss"
    """The metric drawn along the timeline."""
    fault_states: Mapping[str, str] = field(default_factory=dict)
    """Fault kind -> the condition its target is shown in while a fault of that kind is active
    (``FAULT_VIEW_STATES``); a scenario on the fabric passes ``fabric.VIEW_STATES``."""

    def __post_init__(self) -> None:
        unknown = [state for state in self.fault_states.values() if state not in FAULT_VIEW_STATES]
        if unknown:
            raise ValueError(f"fault_states: {unknown[0]!r} is not one of {', '.join(FAULT_VIEW_STATES)}")


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
    failure_identity: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """What besides the signature makes two failures of this scenario one bug (the torch scenario: the
    optimizer step and the tensor): a minimizer keeps it too. None: the signature alone."""
    past_failure: Callable[[World, dict[str, Any]], bool] | None = None
    """Whether a run that has not failed has gone past where ``failure`` happened (the torch scenario:
    every rank completed the failure's step), so that a minimizer's trial stops there: it cannot
    reproduce that failure any more. None: trials run to their end."""
    size_floor: Callable[[str, dict[str, Any], dict[str, Any]], int | None] | None = None
    """``size_floor(param, failure, config)``: the smallest value of a shrinkable size that keeps what
    ``failure`` involves (the torch scenario: the ranks it names); None: the param's minimum."""
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
    Handlers reach it as ``ctx.processes`` (None for plain-data scenarios). An owner may have
    ``summary() -> dict``: what a run's summary says of its processes (``runner.processes_summary``)."""
    view: ScenarioView = field(default_factory=ScenarioView)
    """What a front end shows of its worlds: the rank nodes, their step, weights and status keys, the
    fault kinds that make a rank look slow or partitioned (:class:`ScenarioView`)."""

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

    def resolve_config(
        self, settings: Iterable[str] | Mapping[str, Any] = (), *, files: bool = True
    ) -> dict[str, Any]:
        """Defaults, then the preset named in ``settings`` (if any), then ``settings`` in order.

        ``settings`` is either ``key=value`` strings from the command line or a mapping of
        already-typed values (from Python or a recording). ``files=False``: a ``@FILE`` value is
        refused (settings from a findings database may not make us read files).
        """
        pairs = list(_settings_pairs(self, settings, files))
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
    scenario: Scenario, settings: Iterable[str] | Mapping[str, Any], files: bool
) -> Iterable[tuple[str, Any]]:
    if isinstance(settings, Mapping):
        for name, value in settings.items():
            yield name, scenario.param(name).check(value)
        return
    for setting in settings:
        name, separator, text = setting.partition("=")
        if not separator or not name:
            raise ConfigError(f"--set expects key=value, got {setting!r}")
        yield name.strip(), scenario.param(name.strip()).parse(text, files=files)
