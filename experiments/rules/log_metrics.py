"""A config's log metrics: a metric name -> a user's regex with a group of that name, read from every server log line.
Pure (no Django): the config form (which the API feeds) checks the patterns with `pattern_refusals`, the worker reads
lines with `MetricReader`; both compile only through `compile_pattern`, behind the one check, `pattern_refusal`.

A user's regex runs on the worker's event loop, where a catastrophic pattern (`(a+)+$` on a long line) would
freeze the run's heartbeat, its cancel and its log for minutes. So patterns run on the `regex` engine (mrab-regex,
the `re` syntax) with a time limit per line and per batch of lines; a pattern that runs out of time is switched off
for the rest of the run, and the worker notes that on the run as a warning.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

# The two parsers the bound reads (private modules, without type stubs): the stdlib's, and the `regex` engine's own.
sre: Any = importlib.import_module("re._constants")
sre_parse: Any = importlib.import_module("re._parser")
engine: Any = importlib.import_module("regex._regex_core")

MAX_METRICS = 8
MAX_NAME_LENGTH = 64
MAX_PATTERN_LENGTH = 500
# A sane pattern takes microseconds on a log line (about 3 µs with the time limit's own cost), so a 10,000-line batch
# takes ~30 ms per pattern. A pattern past either budget is not reading a log, it is backtracking.
LINE_BUDGET_S = 0.025
BATCH_BUDGET_S = 0.2
TIMEOUT_KIND = "log_metric_timeout"
INVALID_KIND = "log_metric_invalid"


# A counted repeat (`a{1000000}`) makes the engine's compiler unroll it, about 250 bytes per copy of each part of
# its body: one 20-character pattern made the web process allocate gigabytes while validating a config (and the
# `regex` module's cache kept them). So the parsed pattern is bounded before anything compiles: each count, the
# product of nested counts, and the compiled size (each part of the parse once per copy its counts make, siblings
# added). Read from the parse, never from the text: a leading zero, a comment or verbose mode's spaces
# (`(?x)a{1000 000}`) change the text, not the parse. A log line is at most a few kilobytes anyway; at the bounds a
# pattern compiles in at most about 3.5 MB and 0.15 s.
MAX_REPEAT = 1000
MAX_REPEAT_PRODUCT = 5_000
MAX_COMPILED_SIZE = 6_000


class PatternRefused(ValueError):
    """A pattern this product does not compile; the message says why, in a user's words."""


def pattern_refusal(pattern: str) -> str | None:
    """Why `pattern` may not be compiled as a log metric, or None: the one check before every compile (the config
    form, the API and the worker). Allowed by list: the syntax of Python's `re` that the stdlib parser reads, with
    the engine's own parse (which reads some text otherwise, e.g. `{e<=1}` or spaces in counts) made of the node
    kinds in _ENGINE_NODES; counts bounded on both parses. Parsing allocates nothing per count."""
    if not isinstance(pattern, str):
        return "a pattern is a string"
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"longer than {MAX_PATTERN_LENGTH} characters"
    try:
        parsed = sre_parse.parse(pattern)
    except OverflowError:
        return f"a counted repeat is more than {MAX_REPEAT}"
    except re.error as exc:
        return f"not a valid regex of Python's re syntax ({exc})"
    except RecursionError:
        return "groups nested too deeply"
    try:
        _bound_stdlib(parsed, 1)
        engine_parsed = _engine_parse(pattern)
    except PatternRefused as exc:
        return str(exc)
    except RecursionError:
        return "groups nested too deeply"
    except Exception as exc:  # whatever the engine's parser raises (regex.error, mostly), it cannot run the pattern
        return f"not a valid regex for the log reader ({exc})"
    try:
        _bound_engine(engine_parsed, 1, [0])
    except PatternRefused as exc:
        return str(exc)
    except RecursionError:
        return "groups nested too deeply"
    return None


def _counted(low: int, high: int | None, multiplier: int) -> int:
    """The copies of a repeat's body: `multiplier` (the copies of the repeat) times its count, `low`..`high` (None:
    unbounded, whose body compiles once); refused past the bounds."""
    count = max(low, high or 0, 1)
    if count > MAX_REPEAT:
        raise PatternRefused(f"a counted repeat of {count} is more than {MAX_REPEAT}")
    if multiplier * count > MAX_REPEAT_PRODUCT:
        raise PatternRefused(f"nested counted repeats make more than {MAX_REPEAT_PRODUCT} copies")
    return multiplier * count


# The stdlib parse's node kinds, by list: what may hold other nodes, and the leaves.
_REPEATS = {sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT}
_LEAVES = {sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.AT, sre.IN, sre.GROUPREF}


def _bound_stdlib(parsed: Any, multiplier: int) -> None:
    for op, av in parsed:
        if op in _LEAVES:
            continue
        if op in _REPEATS:
            low, high, item = av
            _bound_stdlib(item, _counted(low, None if high == sre.MAXREPEAT else high, multiplier))
        elif op == sre.SUBPATTERN:
            _bound_stdlib(av[3], multiplier)
        elif op == sre.ATOMIC_GROUP:
            _bound_stdlib(av, multiplier)
        elif op == sre.BRANCH:
            for branch in av[1]:
                _bound_stdlib(branch, multiplier)
        elif op == sre.GROUPREF_EXISTS:
            for branch in av[1:]:
                if branch is not None:
                    _bound_stdlib(branch, multiplier)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            direction, item = av
            _bound_stdlib(item, multiplier)
            low, high = item.getwidth()
            if direction < 0 and low != high:
                raise PatternRefused("a look-behind must match a fixed number of characters")
        else:
            raise PatternRefused(f"{str(op).lower()} is not accepted in a log metric")


def _engine_parse(pattern: str) -> Any:
    """The `regex` engine's own parse of `pattern`, as regex.compile begins (its flags found by a second pass when
    the pattern sets them inline); nothing is compiled."""
    flags = 0
    while True:
        source = engine.Source(pattern)
        info = engine.Info(flags, source.char_type, {})
        source.ignore_space = bool(info.flags & engine.VERBOSE)
        try:
            parsed = engine._parse_pattern(source, info)
        except engine._UnscopedFlagSet:
            flags = info.global_flags
            continue
        if not source.at_end():
            raise regex.error("unbalanced parenthesis", pattern, source.pos)
        return parsed


# The engine's node kinds that the stdlib syntax gives, by list (fuzzy matching, recursion, \K, \G, set operations
# and the rest of what the engine adds are not in it). The repeats are GreedyRepeat and its subclasses.
_ENGINE_NODES = {
    "Any", "AnyAll", "AnyU", "Atomic", "Boundary", "Branch", "Character", "Conditional", "DefaultBoundary",
    "EndOfLine", "EndOfLineU", "EndOfString", "EndOfStringLine", "EndOfStringLineU", "GreedyRepeat", "Group",
    "LazyRepeat", "LookAround", "PossessiveRepeat", "Property", "Range", "RefGroup", "Sequence", "SetUnion",
    "StartOfLine", "StartOfLineU", "StartOfString",
}  # fmt: skip
_ENGINE_CHILDREN = ("items", "branches", "subpattern", "yes_item", "no_item")


def _bound_engine(node: Any, multiplier: int, size: list[int]) -> None:
    """Refuses a node kind not listed, or counts past the bounds; adds the node's copies to `size[0]`."""
    kind = type(node).__name__
    if kind not in _ENGINE_NODES:
        raise PatternRefused(f"the log reader's engine reads part of it as {kind}, which is not accepted")
    size[0] += multiplier
    if size[0] > MAX_COMPILED_SIZE:
        raise PatternRefused(
            f"its counted repeats unroll into more than {MAX_COMPILED_SIZE} parts (nested counts multiply)"
        )
    if isinstance(node, engine.GreedyRepeat):
        multiplier = _counted(node.min_count, node.max_count, multiplier)
    if kind == "SetUnion":
        return  # a character class: characters, ranges and properties, never a repeat
    for name in _ENGINE_CHILDREN:
        child = getattr(node, name, None)
        for item in child if isinstance(child, list) else [child] if child is not None else []:
            _bound_engine(item, multiplier, size)


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """The pattern as the worker runs it (raises regex.error, or PatternRefused, a ValueError, for one that
    pattern_refusal refuses). Not cached: the module's cache would keep every pattern ever validated."""
    problem = pattern_refusal(pattern)
    if problem is not None:
        raise PatternRefused(problem)
    return regex.compile(pattern, cache_pattern=False)


def pattern_refusals(metrics: Any) -> list[str]:
    """Every reason `metrics` (the config's JSON) cannot be a config's log metrics; empty when it can."""
    if not isinstance(metrics, dict):
        return ["Log metrics must be a JSON object of name -> regex."]
    if len(metrics) > MAX_METRICS:
        return [f"At most {MAX_METRICS} log metrics."]
    problems = []
    for name, pattern in metrics.items():
        if not isinstance(name, str) or not name.isidentifier() or len(name) > MAX_NAME_LENGTH:
            problems.append(
                f"{str(name)[:MAX_NAME_LENGTH]!r}: a metric name is an identifier of at most {MAX_NAME_LENGTH}."
            )
            continue
        if not isinstance(pattern, str):
            problems.append(f"The pattern of {name!r} must be a string.")
            continue
        try:
            compiled = compile_pattern(pattern)
        except (regex.error, ValueError) as exc:
            problems.append(f"The pattern of {name!r} is refused: {exc}.")
            continue
        if name not in compiled.groupindex:
            problems.append(needs_group(name))
    return problems


def needs_group(name: str) -> str:
    """The refusal of a pattern that lacks its metric's named group."""
    return f"The pattern of {name!r} needs a named group (?P<{name}>...)."


def timeout_warning(name: str) -> str:
    """The run's warning when `name`'s pattern runs out of time (the same text each time: one warning per metric)."""
    return (
        f"The log metric {name!r} took more than {LINE_BUDGET_S * 1000:.0f} ms on one log line or "
        f"{BATCH_BUDGET_S * 1000:.0f} ms on one batch of lines, so it is off for the rest of this run. Its pattern "
        "backtracks: avoid nested repeats such as (a+)+ and anchor it on fixed text."
    )


@dataclass
class MetricBatch:
    points: dict[str, list[list[float]]] = field(default_factory=dict)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (kind, message), new in this batch


class MetricReader:
    """Reads the config's metrics from numbered lines, each pattern within its time budgets.

    `disabled`: metrics already switched off for this run (a worker that re-attaches a run does not retry them).
    """

    def __init__(
        self,
        metrics: Mapping[str, str],
        *,
        disabled: Iterable[str] = (),
        line_budget: float = LINE_BUDGET_S,
        batch_budget: float = BATCH_BUDGET_S,
    ) -> None:
        self.line_budget = line_budget
        self.batch_budget = batch_budget
        self.patterns: dict[str, regex.Pattern[str]] = {}
        self._pending: list[tuple[str, str]] = []
        skip = set(disabled)
        for name, pattern in metrics.items():
            if name in skip:
                continue
            try:
                self.patterns[name] = compile_pattern(pattern)
            except (regex.error, ValueError, OverflowError, TypeError) as exc:
                # Stored before the form checked with this engine: say so once, read the others.
                self._pending.append((INVALID_KIND, f"The log metric {name!r} cannot be compiled ({exc}); it is off."))

    def read(self, first_line: int, lines: Sequence[str]) -> MetricBatch:
        batch = MetricBatch(warnings=self._pending)
        self._pending = []
        for name, pattern in list(self.patterns.items()):
            points = self._read_one(name, pattern, first_line, lines)
            if points is None:
                del self.patterns[name]
                batch.warnings.append((TIMEOUT_KIND, timeout_warning(name)))
            elif points:
                batch.points[name] = points
        return batch

    def _read_one(
        self, name: str, pattern: regex.Pattern[str], first_line: int, lines: Sequence[str]
    ) -> list[list[float]] | None:
        """The pattern's points in `lines`, or None when it ran out of time."""
        points = []
        deadline = time.perf_counter() + self.batch_budget
        for i, line in enumerate(lines):
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return None
            try:
                match = pattern.search(line, timeout=min(self.line_budget, remaining))
            except TimeoutError:
                return None
            if match is None:
                continue
            try:
                points.append([first_line + i, float(match.group(name))])
            except (ValueError, TypeError, IndexError):
                pass  # a match without a number in the group is not a measurement
        return points
