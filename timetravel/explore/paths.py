"""State paths and predicates over a World's plain data.

A **path** names a subtree of the world: segments separated by ``/`` (``nodes/rank3/weights``,
``metrics/loss/0``, ``faults/2/params``). A segment ``*`` matches every key of a dict or every
index of a list at that level, so ``nodes/*/weights`` names the weights of every node that has
them. The world is seen through :func:`world_tree`: its public parts as one dict (the kernel's
bookkeeping, such as the open hash-chain batch, is left out).

A **predicate** is a small expression over paths, parsed by a recursive-descent parser here
(never ``eval``: a predicate may come from a script or a shared bug report)::

    nonfinite(nodes/*/weights)          any NaN or Inf under any match
    differ(nodes/*/weights)             the matches are not all bit-identical (replicas diverged)
    changed(nodes/rank3/step)           differs from the previous point of evaluation
    exists(down/rank2)                  the path names something
    nodes/*/step >= 40                  a comparison holds for some match
    max(nodes/*/loss) > 1e3 and not exists(failures/0)
    t_ns >= 950ms                       times carry their unit (a bare number is a number)

Functions: ``nonfinite``, ``differ``, ``changed``, ``exists`` (truth values); ``len`` (the
number of matches of a wildcard path, or the length of the one value a plain path names); and
``max``, ``min``, ``sum``, ``mean``, ``norm`` (over every number under every matched value). A comparison
with a wildcard path holds when it holds for *some* match; the matches for which it holds are its
**witnesses**, which is how ``find-first nonfinite(nodes/*/weights)`` names the rank.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from timetravel.explore.diff import diff as structural_diff
from timetravel.sim.elided import ElidedArray, ElidedError, summary_of
from timetravel.sim.encoding import array_digest
from timetravel.sim.timefmt import TimeFormatError, parse_time

if TYPE_CHECKING:
    from timetravel.sim.world import World

WILDCARD = "*"
PATH_CHARS_MAX = 512
PATH_SEGMENTS_MAX = 32
MATCHES_MAX = 100_000
"""Bound on the values one wildcard path may select (a 10,000-rank world has 10,000 nodes)."""
PREDICATE_CHARS_MAX = 1_000
PREDICATE_DEPTH_MAX = 32
WITNESSES_MAX = 16
COMPLETION_PARENTS_MAX = 8
"""Under a wildcard, completion offers the keys of this many matched parents."""
"""Witness paths kept per predicate result (the first ones in walk order)."""

_SEGMENT = re.compile(r"^[A-Za-z0-9_.:\-*]+$")
WORLD_PARTS = (
    "scenario",
    "seed",
    "branch_key",
    "config",
    "t_ns",
    "seq",
    "events_processed",
    "nodes",
    "roles",
    "down",
    "choices",
    "fabric",
    "faults",
    "failures",
    "metrics",
    "log",
    "queue",
)


class PathError(ValueError):
    """A path or predicate that cannot be read; the message names the text and the problem."""


# -- paths --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Path:
    """A parsed path: its segments, each a key, an index or ``*``."""

    segments: tuple[str, ...]

    @property
    def has_wildcard(self) -> bool:
        return WILDCARD in self.segments

    def __str__(self) -> str:
        return "/".join(self.segments)


def parse_path(text: str) -> Path:
    """Read a path such as ``nodes/*/weights``; an empty text or ``/`` names the whole tree."""
    if len(text) > PATH_CHARS_MAX:
        raise PathError(f"path longer than {PATH_CHARS_MAX} characters")
    stripped = text.strip().strip("/")
    if not stripped:
        return Path(())
    segments = tuple(stripped.split("/"))
    if len(segments) > PATH_SEGMENTS_MAX:
        raise PathError(f"path {text!r} has more than {PATH_SEGMENTS_MAX} segments")
    for segment in segments:
        if not _SEGMENT.match(segment) or (WILDCARD in segment and segment != WILDCARD):
            raise PathError(
                f"path {text!r}: segment {segment!r} is not a key, an index or '*' "
                "(letters, digits, _ . : - only)"
            )
    return Path(segments)


def world_tree(world: World) -> dict[str, Any]:
    """The world's public parts as one dict: the tree that paths, predicates and diffs walk.

    Pending events are listed in the order they will run, each as a dict, so a path such as
    ``queue/0/kind`` reads naturally.
    """
    tree: dict[str, Any] = {name: getattr(world, name) for name in WORLD_PARTS}
    tree["queue"] = [
        {"t_ns": event[0], "seq": event[1], "dst": event[2], "kind": event[3], "payload": event[4]}
        for event in sorted(world.queue)
    ]
    return tree


def _children(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        yield from ((str(key), item) for key, item in value.items())
    elif isinstance(value, (list, tuple)):
        yield from ((str(index), item) for index, item in enumerate(value))


def _child(value: Any, segment: str) -> tuple[bool, Any]:
    if isinstance(value, dict):
        return (True, value[segment]) if segment in value else (False, None)
    if isinstance(value, (list, tuple)) and segment.lstrip("-").isdigit():
        index = int(segment)
        if -len(value) <= index < len(value):
            return True, value[index]
    if isinstance(value, (list, tuple)):
        # a record list by id (``faults/f2``), as the diff names such records
        for item in value:
            if isinstance(item, dict) and item.get("id") == segment:
                return True, item
    if isinstance(value, np.ndarray) and value.ndim >= 1 and segment.lstrip("-").isdigit():
        index = int(segment)
        if -value.shape[0] <= index < value.shape[0]:
            return True, value[index]
    return False, None


def select(tree: Any, path: Path | str) -> list[tuple[str, Any]]:
    """Every (concrete path, value) that ``path`` names in ``tree``, in walk order.

    A wildcard visits dict keys in their order and list items by index, so the result is stable.
    More than MATCHES_MAX matches is an error rather than a slow surprise.
    """
    parsed = parse_path(path) if isinstance(path, str) else path
    found: list[tuple[str, Any]] = []
    _select(tree, parsed.segments, (), found)
    return found


def _select(value: Any, rest: tuple[str, ...], prefix: tuple[str, ...], found: list[tuple[str, Any]]) -> None:
    if not rest:
        if len(found) >= MATCHES_MAX:
            raise PathError(f"path selects more than {MATCHES_MAX} values; narrow it")
        found.append(("/".join(prefix), value))
        return
    segment, tail = rest[0], rest[1:]
    if segment == WILDCARD:
        for key, item in _children(value):
            _select(item, tail, (*prefix, key), found)
        return
    present, item = _child(value, segment)
    if present:
        _select(item, tail, (*prefix, segment), found)


def get(tree: Any, path: Path | str) -> Any:
    """The one value a path without wildcards names; PathError when it names nothing."""
    parsed = parse_path(path) if isinstance(path, str) else path
    if parsed.has_wildcard:
        raise PathError(f"path {parsed} has a wildcard; use select()")
    matches = select(tree, parsed)
    if not matches:
        raise PathError(f"path {parsed} names nothing here")
    return matches[0][1]


def completions(tree: Any, prefix: str, limit: int = 50) -> list[str]:
    """Paths that extend ``prefix`` by one segment (for the shell's and the TUI's completion)."""
    head, _, partial = prefix.rpartition("/")
    try:
        parents = select(tree, parse_path(head)) if head else [("", tree)]
    except PathError:
        return []
    names: list[str] = []
    for _, parent in parents[:COMPLETION_PARENTS_MAX]:
        for key, _ in _children(parent):
            candidate = f"{head}/{key}" if head else key
            if key.startswith(partial) and candidate not in names:
                names.append(candidate)
                if len(names) >= limit:
                    return names
    return names


# -- values -------------------------------------------------------------------------------------


def is_nonfinite(value: Any) -> bool:
    """True when a float, an array or anything nested in a container holds a NaN or an Inf."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, ElidedArray):
        return summary_of(value)[1] > 0  # its summary, or ElidedError: rebuilt by re-execution
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuSUV" and value.dtype.name != "bfloat16":
            return False
        return bool(not np.all(np.isfinite(value)))
    if isinstance(value, np.generic):
        return is_nonfinite(value.item())
    if isinstance(value, (dict, list, tuple)):
        return any(is_nonfinite(item) for _, item in _children(value))
    return False


def numbers(value: Any) -> Iterator[float]:
    """Every number under ``value`` (arrays element by element, as float)."""
    if isinstance(value, (bool, int, float)):
        yield float(value)
    elif isinstance(value, ElidedArray):
        raise ElidedError(f"the values of this {value!r} are rebuilt by re-execution")
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf" or value.dtype.name == "bfloat16":
            yield from value.astype(np.float64).reshape(-1).tolist()
    elif isinstance(value, np.generic):
        yield from numbers(value.item())
    elif isinstance(value, (dict, list, tuple)):
        for _, item in _children(value):
            yield from numbers(item)


def values_equal(a: Any, b: Any) -> bool:
    """Bitwise structural equality (the rule of the diff: NaN equals NaN, 0.0 differs from -0.0).

    Two arrays of one dtype and shape compare by their bytes, which is that rule, without the
    diff's per-element summary: ``differ(nodes/*/weights)`` evaluated after every event of a scan
    compares every replica with the first one each time."""
    if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape:
        return a.tobytes() == b.tobytes()
    if isinstance(a, ElidedArray) or isinstance(b, ElidedArray):  # the same bits, the same digest
        return _array_digest(a) == _array_digest(b)
    return structural_diff(a, b, changes_max=0).equal


def _array_digest(value: Any) -> bytes | None:
    if isinstance(value, ElidedArray):
        return value.digest
    return array_digest(value) if isinstance(value, np.ndarray) else None


# -- predicates ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PredicateResult:
    """Whether a predicate holds, and the concrete paths for which it does (the witnesses)."""

    holds: bool
    witnesses: tuple[str, ...] = ()


@dataclass
class Evaluation:
    """What a predicate is evaluated against: the tree now and, for ``changed``, the tree before."""

    tree: Any
    previous: Any = None


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:ns|us|ms|s)?(?![A-Za-z0-9_/*]))
      | (?P<string>"[^"\\]*"|'[^'\\]*')
      | (?P<op>==|!=|<=|>=|<|>|\(|\)|,)
      | (?P<word>[A-Za-z0-9_.:\-*/]+)
    )""",
    re.VERBOSE,
)
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda x, y: x == y,
    "!=": lambda x, y: x != y,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
}
TRUTH_FUNCTIONS = ("nonfinite", "differ", "changed", "exists")
NUMBER_FUNCTIONS = ("len", "max", "min", "sum", "mean", "norm")
KEYWORDS = ("and", "or", "not", "true", "false", "null")


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    position: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise PathError(
                f"predicate: cannot read {text[position : position + 20]!r} at column {position + 1}"
            )
        kind = match.lastgroup or ""
        tokens.append(_Token(kind, match.group(kind), match.start(kind)))
        position = match.end()
    return tokens


class Predicate:
    """A parsed predicate; evaluate it with :meth:`evaluate`. See the module docstring."""

    def __init__(self, text: str, root: Any) -> None:
        self.text = text
        self._root = root

    @property
    def paths(self) -> list[Path]:
        """Every path the predicate reads (to know which parts of the world it depends on)."""
        found: list[Path] = []
        _collect_paths(self._root, found)
        return found

    @property
    def uses_changed(self) -> bool:
        return _uses_function(self._root, "changed")

    @property
    def uses_equality(self) -> bool:
        """Whether it compares with ``==`` or ``!=``: such a predicate often holds for a while only."""
        return _uses_comparison(self._root, ("==", "!="))

    def evaluate(self, tree: Any, previous: Any = None) -> PredicateResult:
        value = _evaluate(self._root, Evaluation(tree, previous))
        if isinstance(value, PredicateResult):
            return value
        return PredicateResult(bool(value))

    def __repr__(self) -> str:
        return f"Predicate({self.text!r})"


def parse_predicate(text: str) -> Predicate:
    """Parse a predicate (see the module docstring); PathError names what is wrong and where."""
    if len(text) > PREDICATE_CHARS_MAX:
        raise PathError(f"predicate longer than {PREDICATE_CHARS_MAX} characters")
    if not text.strip():
        raise PathError("empty predicate")
    parser = _Parser(text, _tokenize(text))
    root = parser.expression(0)
    if parser.position < len(parser.tokens):
        token = parser.tokens[parser.position]
        raise PathError(f"predicate: unexpected {token.text!r} at column {token.position + 1}")
    return Predicate(text, root)


class _Parser:
    """Recursive descent: or < and < not < comparison < operand. Nodes are plain tuples."""

    def __init__(self, text: str, tokens: list[_Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.position = 0

    def _peek(self) -> _Token | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _take(self) -> _Token:
        token = self._peek()
        if token is None:
            raise PathError(f"predicate {self.text!r} ends too early")
        self.position += 1
        return token

    def _expect(self, text: str) -> None:
        token = self._take()
        if token.text != text:
            raise PathError(
                f"predicate: expected {text!r} at column {token.position + 1}, got {token.text!r}"
            )

    def _is_word(self, word: str) -> bool:
        token = self._peek()
        return token is not None and token.kind == "word" and token.text == word

    def expression(self, depth: int) -> tuple[Any, ...]:
        if depth > PREDICATE_DEPTH_MAX:
            raise PathError(f"predicate nests deeper than {PREDICATE_DEPTH_MAX}")
        node = self._and(depth)
        while self._is_word("or"):
            self.position += 1
            node = ("or", node, self._and(depth))
        return node

    def _and(self, depth: int) -> tuple[Any, ...]:
        node = self._not(depth)
        while self._is_word("and"):
            self.position += 1
            node = ("and", node, self._not(depth))
        return node

    def _not(self, depth: int) -> tuple[Any, ...]:
        if self._is_word("not"):
            self.position += 1
            return ("not", self._not(depth + 1))
        return self._comparison(depth)

    def _comparison(self, depth: int) -> tuple[Any, ...]:
        left = self._operand(depth)
        token = self._peek()
        if token is not None and token.text in _COMPARISONS:
            self.position += 1
            return ("compare", token.text, left, self._operand(depth))
        return left

    def _operand(self, depth: int) -> tuple[Any, ...]:
        token = self._take()
        if token.text == "(":
            node = self.expression(depth + 1)
            self._expect(")")
            return node
        if token.kind == "number":
            return ("literal", _number(token.text))
        if token.kind == "string":
            return ("literal", token.text[1:-1])
        if token.kind != "word":
            raise PathError(f"predicate: unexpected {token.text!r} at column {token.position + 1}")
        if token.text in ("true", "false", "null"):
            return ("literal", {"true": True, "false": False, "null": None}[token.text])
        following = self._peek()
        if following is not None and following.text == "(":
            return self._call(token)
        if token.text in KEYWORDS:
            raise PathError(f"predicate: unexpected {token.text!r} at column {token.position + 1}")
        return ("path", parse_path(token.text))

    def _call(self, name: _Token) -> tuple[Any, ...]:
        if name.text not in TRUTH_FUNCTIONS + NUMBER_FUNCTIONS:
            known = ", ".join(TRUTH_FUNCTIONS + NUMBER_FUNCTIONS)
            raise PathError(f"predicate: unknown function {name.text!r} (known: {known})")
        self._expect("(")
        argument = self._take()
        if argument.kind != "word":
            raise PathError(f"predicate: {name.text}() takes a path, got {argument.text!r}")
        self._expect(")")
        return ("call", name.text, parse_path(argument.text))


def _number(text: str) -> int | float:
    """A number token: a time with its unit is integer nanoseconds; otherwise an int or a float."""
    if text[-1].isalpha():
        try:
            return parse_time(text)
        except TimeFormatError as error:
            raise PathError(f"predicate: {error}") from None
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    return float(text)


def _collect_paths(node: tuple[Any, ...], found: list[Path]) -> None:
    tag = node[0]
    if tag == "path":
        found.append(node[1])
    elif tag == "call":
        found.append(node[2])
    elif tag in ("and", "or"):
        _collect_paths(node[1], found)
        _collect_paths(node[2], found)
    elif tag == "not":
        _collect_paths(node[1], found)
    elif tag == "compare":
        _collect_paths(node[2], found)
        _collect_paths(node[3], found)


def _uses_function(node: tuple[Any, ...], name: str) -> bool:
    tag = node[0]
    if tag == "call":
        return bool(node[1] == name)
    if tag in ("and", "or"):
        return _uses_function(node[1], name) or _uses_function(node[2], name)
    if tag == "not":
        return _uses_function(node[1], name)
    if tag == "compare":
        return _uses_function(node[2], name) or _uses_function(node[3], name)
    return False


def _uses_comparison(node: tuple[Any, ...], operators: tuple[str, ...]) -> bool:
    tag = node[0]
    if tag == "compare":
        return bool(node[1] in operators)
    if tag in ("and", "or"):
        return _uses_comparison(node[1], operators) or _uses_comparison(node[2], operators)
    if tag == "not":
        return _uses_comparison(node[1], operators)
    return False


def _evaluate(node: tuple[Any, ...], context: Evaluation) -> Any:
    tag = node[0]
    if tag == "literal":
        return node[1]
    if tag == "path":
        return _Matches(select(context.tree, node[1]))
    if tag == "call":
        return _call(node[1], node[2], context)
    if tag == "not":
        return PredicateResult(not _truth(_evaluate(node[1], context)).holds)
    if tag in ("and", "or"):
        left = _truth(_evaluate(node[1], context))
        if (tag == "and" and not left.holds) or (tag == "or" and left.holds):
            return left
        right = _truth(_evaluate(node[2], context))
        if not right.holds:
            return right
        return PredicateResult(True, (left.witnesses + right.witnesses)[:WITNESSES_MAX])
    if tag == "compare":
        return _compare(node[1], _evaluate(node[2], context), _evaluate(node[3], context))
    raise AssertionError(f"unknown predicate node {tag!r}")


@dataclass(frozen=True)
class _Matches:
    """The values a path selected, kept with their concrete paths for witnesses."""

    items: list[tuple[str, Any]]


def _truth(value: Any) -> PredicateResult:
    if isinstance(value, PredicateResult):
        return value
    if isinstance(value, _Matches):
        witnesses = tuple(path for path, item in value.items if _truthy(item))
        return PredicateResult(bool(witnesses), witnesses[:WITNESSES_MAX])
    return PredicateResult(_truthy(value))


def _truthy(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return bool(value.size and value.any())
    return bool(value)


def _call(name: str, path: Path, context: Evaluation) -> Any:
    matches = select(context.tree, path)
    if name == "exists":
        return PredicateResult(bool(matches), tuple(p for p, _ in matches[:WITNESSES_MAX]))
    if name == "nonfinite":
        witnesses = tuple(p for p, value in matches if is_nonfinite(value))
        return PredicateResult(bool(witnesses), witnesses[:WITNESSES_MAX])
    if name == "differ":
        if len(matches) < 2:
            return PredicateResult(False)
        first_path, first = matches[0]
        odd = tuple(p for p, value in matches[1:] if not values_equal(first, value))
        return PredicateResult(bool(odd), ((first_path, *odd) if odd else ())[:WITNESSES_MAX])
    if name == "changed":
        if context.previous is None:
            return PredicateResult(False)
        before = dict(select(context.previous, path))
        now = dict(matches)
        witnesses = tuple(
            p for p, value in matches if p not in before or not values_equal(before[p], value)
        ) + tuple(p for p in before if p not in now)
        return PredicateResult(bool(witnesses), witnesses[:WITNESSES_MAX])
    if name == "len":
        if path.has_wildcard or not matches:
            return len(matches)
        value = matches[0][1]
        return len(value) if isinstance(value, (dict, list, tuple, np.ndarray, str, bytes)) else 1
    return _aggregate(name, [number for _, value in matches for number in numbers(value)])


def _aggregate(name: str, values: list[float]) -> float | None:
    if not values:
        return None
    if name == "max":
        return max(values)
    if name == "min":
        return min(values)
    if name == "sum":
        return math.fsum(values)
    if name == "mean":
        return math.fsum(values) / len(values)
    return math.sqrt(math.fsum(v * v for v in values))


def _compare(operator: str, left: Any, right: Any) -> PredicateResult:
    compare = _COMPARISONS[operator]
    if isinstance(right, _Matches) and not isinstance(left, _Matches):
        flipped = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(operator, operator)
        return _compare(flipped, right, left)
    if isinstance(left, _Matches):
        right_value = _single(right)
        witnesses = tuple(p for p, value in left.items if _safe_compare(compare, _plain(value), right_value))
        return PredicateResult(bool(witnesses), witnesses[:WITNESSES_MAX])
    return PredicateResult(_safe_compare(compare, _plain(left), _plain(right)))


def _single(value: Any) -> Any:
    if isinstance(value, _Matches):
        if len(value.items) != 1:
            raise PathError("a comparison may have a wildcard path on one side only")
        return _plain(value.items[0][1])
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, PredicateResult):
        return value.holds
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.size == 1:
        return value.reshape(-1)[0].item()
    return value


def _safe_compare(compare: Callable[[Any, Any], bool], left: Any, right: Any) -> bool:
    """Compare, treating incomparable values (a str against a number, None) as not holding."""
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return False
    try:
        return bool(compare(left, right))
    except TypeError:
        return False
