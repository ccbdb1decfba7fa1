"""The schema of every frame: sizes before decoding, each field's type and range after.

A recording is untrusted input, and its checksums only say the bytes are the ones the writer (or
whoever forged the file) wrote. This table says what a well-formed frame may hold, and the reader
applies it to every frame it decodes (``check_payload``), so a frame whose values are wrong is one
:class:`RecordingError` naming the frame, the field and the byte offset instead of a ``KeyError``
three layers up. The writer checks the same size caps, so it never writes a frame the reader
would refuse. docs/recording-format.md prints this table.

**Sizes first.** ``FrameSchema.raw_bytes_max`` caps a frame's decoded size before anything is
decompressed (the frame header states it), and ``items_max`` caps how many msgpack containers
and container entries one payload may decode to: a 20 MB payload of twenty million empty lists
is 1.4 GB of Python lists, so the count is what bounds memory, not the bytes.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

from timetravel.recording.format import FrameType

MIB = 1024 * 1024
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
COUNT_RANGE = (0, INT64_MAX)
SEED_RANGE = (0, UINT64_MAX)
CHAIN_BATCH_EVENTS_MAX = 1 << 20
"""The kernel hashes events in batches of a few thousand; a header asking for more is not ours."""
NAME_CHARS_MAX = 256
"""Branch names, scenario names, stop reasons, outcome words."""
TEXT_CHARS_MAX = 64 * 1024
"""Failure and note messages (the catalog keeps at most SUMMARY_TEXT_CHARS_MAX of them)."""
DIGEST_HEX_CHARS = 32
DISPLAY_UNITS = ("ns", "us", "ms", "s")
CONFIG_BYTES_MAX = 32 * MIB
"""HEADER and BRANCH frames carry a config (a json key may be read from a file of up to 16 MiB:
sim.scenario.JSON_FILE_BYTES_MAX), so their cap leaves room for two of those."""


@dataclass(frozen=True)
class FieldRule:
    """One payload key: its type (``int``, ``str``, ``bool``, ``bytes``, ``map``, ``list``, ``container``
    (a list or a map), ``digest``
    (16 bytes), ``hex`` (32 hex digits), ``failure`` (a failure map or nil)), whether it must be
    there, and the allowed range (ints) or length (str, bytes, list)."""

    name: str
    kind: str
    required: bool = True
    low: int = 0
    high: int = INT64_MAX
    choices: tuple[str, ...] = ()
    nullable: bool = False
    """nil is allowed too."""


@dataclass(frozen=True)
class FrameSchema:
    raw_bytes_max: int
    """Decoded payload bytes at most (checked from the frame header, before decompressing)."""
    items_max: int
    """msgpack containers plus their entries at most (checked while decoding)."""
    fields: tuple[FieldRule, ...]


def _branch() -> FieldRule:
    return FieldRule("branch", "str", required=False, high=NAME_CHARS_MAX)


def _count(name: str, *, required: bool = True, low: int = 0, high: int = INT64_MAX) -> FieldRule:
    return FieldRule(name, "int", required=required, low=low, high=high)


FRAME_SCHEMAS: dict[int, FrameSchema] = {
    FrameType.HEADER: FrameSchema(
        CONFIG_BYTES_MAX,
        4_000_000,
        (
            FieldRule("format", "list", high=2),
            FieldRule("timetravel", "str", required=False, high=NAME_CHARS_MAX),
            FieldRule("scenario", "str", high=NAME_CHARS_MAX),
            FieldRule("scenario_module", "str", required=False, high=TEXT_CHARS_MAX),
            FieldRule("config", "map"),
            FieldRule("seed", "int", low=SEED_RANGE[0], high=SEED_RANGE[1]),
            FieldRule("branch_key", "int", required=False, low=SEED_RANGE[0], high=SEED_RANGE[1]),
            FieldRule("display_unit", "str", choices=DISPLAY_UNITS),
            FieldRule("code_fingerprint", "str", required=False, high=NAME_CHARS_MAX),
            FieldRule("platform_fingerprint", "str", required=False, high=NAME_CHARS_MAX),
            _count("snapshot_every_events", required=False, low=1),
            _count("snapshot_quiet_ns", required=False),
            _count("chain_batch_events", required=False, low=1, high=CHAIN_BATCH_EVENTS_MAX),
            _count("page_bytes", required=False, low=1, high=64 * MIB),
            FieldRule("overrides", "list", required=False, high=1_000_000),
            FieldRule("determinism", "str", required=False, high=NAME_CHARS_MAX),
        ),
    ),
    FrameType.EVENTS: FrameSchema(
        128 * MIB,
        4_000_000,
        (
            _branch(),
            _count("first"),
            _count("count", low=1, high=CHAIN_BATCH_EVENTS_MAX),
            FieldRule("digest", "digest"),
            FieldRule("events", "bytes", high=128 * MIB),
            FieldRule("partial", "bool", required=False),
        ),
    ),
    FrameType.BLOBS: FrameSchema(64 * MIB, 2_000_000, (FieldRule("blobs", "list", high=1_000_000),)),
    FrameType.MANIFEST: FrameSchema(
        64 * MIB,
        4_000_000,
        (
            _branch(),
            _count("index"),
            _count("events"),
            _count("t_ns"),
            _count("seq", required=False),
            FieldRule("state_hash", "hex"),
            FieldRule("effects_hash", "hex", required=False),
            FieldRule("display_unit", "str", required=False, choices=DISPLAY_UNITS),
            FieldRule("parts", "map"),
            FieldRule("nodes", "list"),
            FieldRule("queue", "list"),
            FieldRule("metrics", "list"),
            FieldRule("chain", "list", high=3),
            FieldRule("final", "bool", required=False),
        ),
    ),
    FrameType.CHOICES: FrameSchema(
        64 * MIB, 4_000_000, (_branch(), _count("first"), FieldRule("entries", "list", high=4_000_000))
    ),
    FrameType.JOURNAL: FrameSchema(
        128 * MIB, 8_000_000, (_branch(), _count("first"), FieldRule("records", "list", high=1_000_000))
    ),
    FrameType.FAILURE: FrameSchema(
        1 * MIB, 10_000, (_branch(), _count("event"), FieldRule("failure", "failure"))
    ),
    FrameType.BRANCH: FrameSchema(
        CONFIG_BYTES_MAX,
        4_000_000,
        (
            FieldRule("name", "str", high=NAME_CHARS_MAX),
            FieldRule("parent", "str", required=False, high=NAME_CHARS_MAX),
            _count("at_events"),
            _count("at_ns", required=False),
            FieldRule("changes", "container", required=False, high=100_000),
            FieldRule("request", "map", required=False),
            FieldRule("overrides", "list", required=False, high=1_000_000),
            FieldRule("branch_key", "int", required=False, low=SEED_RANGE[0], high=SEED_RANGE[1]),
        ),
    ),
    FrameType.END: FrameSchema(
        1 * MIB,
        10_000,
        (
            _branch(),
            FieldRule("stop", "str", high=NAME_CHARS_MAX),
            FieldRule("outcome", "str", choices=("pass", "fail")),
            FieldRule("failure", "failure", required=False),
            _count("events"),
            _count("t_end_ns"),
            FieldRule("state_hash", "hex"),
            FieldRule("hash_chain", "hex", required=False),
        ),
    ),
    FrameType.INDEX: FrameSchema(
        128 * MIB,
        8_000_000,
        (
            FieldRule("frames", "list", high=8_000_000),
            FieldRule("events", "map"),
            FieldRule("manifests", "map"),
            FieldRule("choices", "map"),
            FieldRule("failures", "list"),
            FieldRule("branches", "map"),
            FieldRule("ends", "map"),
            FieldRule("notes", "list"),
            FieldRule("blob_digests", "bytes", high=128 * MIB),
            FieldRule("blob_offsets", "bytes", high=128 * MIB),
        ),
    ),
    FrameType.NOTE: FrameSchema(
        1 * MIB,
        10_000,
        (
            _branch(),
            FieldRule("level", "str", required=False, high=NAME_CHARS_MAX),
            FieldRule("message", "str", high=TEXT_CHARS_MAX),
        ),
    ),
}
UNKNOWN_FRAME_SCHEMA = FrameSchema(1 * MIB, 10_000, ())
"""Frame types of a later minor version: read (and skipped) within small limits."""

FAILURE_FIELDS = (
    FieldRule("kind", "str", high=NAME_CHARS_MAX),
    FieldRule("node", "str", required=False, high=NAME_CHARS_MAX, nullable=True),
    FieldRule("t_ns", "int", required=False, nullable=True),
    FieldRule("message", "str", required=False, high=TEXT_CHARS_MAX),
    FieldRule("signature", "str", required=False, high=TEXT_CHARS_MAX),
)


def schema_for(frame_type: int) -> FrameSchema:
    return FRAME_SCHEMAS.get(frame_type, UNKNOWN_FRAME_SCHEMA)


def check_payload(frame_type: int, payload: dict[str, Any]) -> str | None:
    """What is wrong with a decoded payload (``field 'events': ...``), or None when it is well formed."""
    for rule in schema_for(frame_type).fields:
        problem = check_field(rule, payload)
        if problem is not None:
            return problem
    return None


def check_field(rule: FieldRule, payload: dict[str, Any]) -> str | None:
    if rule.name not in payload:
        return f"field {rule.name!r} is missing" if rule.required else None
    value = payload[rule.name]
    if value is None and (rule.nullable or (rule.kind == "failure" and not rule.required)):
        return None
    problem = _check_value(rule, value)
    return None if problem is None else f"field {rule.name!r} {problem} (got {_shown(value)})"


def _check_value(rule: FieldRule, value: Any) -> str | None:
    kind = rule.kind
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            return "is not an integer"
        if not rule.low <= value <= rule.high:
            return f"is out of range {rule.low}..{rule.high}"
        return None
    if kind == "bool":
        return None if isinstance(value, bool) else "is not a boolean"
    if kind == "digest":
        return None if isinstance(value, bytes) and len(value) == 16 else "is not a 16-byte digest"
    if kind == "hex":
        if not isinstance(value, str) or len(value) != DIGEST_HEX_CHARS:
            return "is not a 32-digit hex digest"
        return None if all(c in "0123456789abcdef" for c in value) else "is not a 32-digit hex digest"
    if kind == "failure":
        if not isinstance(value, dict):
            return "is not a failure map"
        for field in FAILURE_FIELDS:
            problem = check_field(field, value)
            if problem is not None:
                return f"is not a valid failure: {problem}"
        return None
    expected = _KIND_TYPES[kind]
    if not isinstance(value, expected):
        return f"is not {_KIND_NAMES[kind]}"
    if rule.choices and value not in rule.choices:
        return f"is not one of {', '.join(rule.choices)}"
    if isinstance(value, str | bytes | list) and len(value) > rule.high:
        return f"is longer than {rule.high}"
    return None


_SHOWN = reprlib.Repr()
"""Quotes a wrong value in an error: bounded in depth and length, whatever a forged frame holds."""
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict = 3, 4, 4
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 40


def _shown(value: Any) -> str:
    text = _SHOWN.repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_KIND_TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "bytes": bytes,
    "map": dict,
    "list": list,
    "container": (list, dict),
}
_KIND_NAMES = {
    "str": "a string",
    "bytes": "bytes",
    "map": "a map",
    "list": "a list",
    "container": "a list or map",
}


def schema_table_markdown() -> str:
    """The schema as the Markdown table docs/recording-format.md prints (a test keeps them equal)."""
    lines = [
        "| frame | decoded bytes max | items max | field | type | required | range / length |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for frame_type, schema in FRAME_SCHEMAS.items():
        name = FrameType(frame_type).name
        size = f"{schema.raw_bytes_max // MIB} MiB"
        for position, rule in enumerate(schema.fields):
            head = f"| {name} | {size} | {schema.items_max:,} |" if position == 0 else "| | | |"
            lines.append(
                f"{head} `{rule.name}` | {rule.kind} | {'yes' if rule.required else 'no'} | {_range(rule)} |"
            )
    return "\n".join(lines)


def _range(rule: FieldRule) -> str:
    if rule.choices:
        return ", ".join(rule.choices)
    if rule.kind == "int":
        return f"{_number(rule.low)}..{_number(rule.high)}"
    if rule.kind in ("str", "bytes", "list") or (rule.kind == "container" and rule.high != INT64_MAX):
        return f"length <= {rule.high:,}" if rule.high != INT64_MAX else ""
    if rule.kind == "failure":
        return "`kind`, `node`, `t_ns`, `message`, `signature` checked the same way"
    return ""


def _number(value: int) -> str:
    names = {INT64_MAX: "2^63-1", UINT64_MAX: "2^64-1"}
    return names.get(value, f"{value:,}")
