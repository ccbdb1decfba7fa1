"""Predicates over state paths.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from timetravel.explore.paths import (
    Path,
    PathError,
    is_nonfinite,
    numbers,
    parse_path,
    select,
    values_equal,
)
from timetravel.sim.timefmt import TimeFormatError, parse_time

PREDICATE_CHARS_MAX = 1_000
PREDICATE_DEPTH_MAX = 32
WITNESSES_MAX = 16
"""Witness paths kept per predicate result (the first ones in walk order)."""

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
