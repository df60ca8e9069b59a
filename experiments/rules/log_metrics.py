"""A config's log metrics: a metric name -> a user's regex with a group of that name, read from every server log line.
Pure (no Django): the config form checks the patterns with `pattern_refusals`, the worker reads lines with
`MetricReader`.

A user's regex runs on the worker's event loop, where a catastrophic pattern (`(a+)+$` on a long line) would
freeze the run's heartbeat, its cancel and its log for minutes. So patterns run on the `regex` engine (mrab-regex,
the `re` syntax) with a time limit per line and per batch of lines; a pattern that runs out of time is switched off
for the rest of the run, and the worker notes that on the run as a warning.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

MAX_METRICS = 8
MAX_NAME_LENGTH = 64
MAX_PATTERN_LENGTH = 500
# A sane pattern takes microseconds on a log line (about 3 µs with the time limit's own cost), so a 10,000-line batch
# takes ~30 ms per pattern. A pattern past either budget is not reading a log, it is backtracking.
LINE_BUDGET_S = 0.025
BATCH_BUDGET_S = 0.2
TIMEOUT_KIND = "log_metric_timeout"
INVALID_KIND = "log_metric_invalid"


# A counted repeat (`a{1000000}`) is compiled into that many copies: one 20-character pattern could make the web
# process allocate gigabytes while validating a config. Counts are bounded before anything compiles, each one and
# their product through nested groups (`(a{100}){100}`); a log line is at most a few kilobytes anyway.
MAX_REPEAT = 1000
MAX_REPEAT_PRODUCT = 10_000
_COUNT = regex.compile(r"\{(\d+)(?:,(\d*))?\}")


def repeat_refusal(pattern: str) -> str | None:
    """Why the counted repeats of `pattern` are too large to compile, or None. Scans the text itself (escapes and
    character classes skipped), so nothing is allocated by the counts it reads."""
    frames = [1]  # the largest repeat product inside each open group
    last = 1  # the repeat product of the atom a count would apply to
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i, last = i + 2, 1
            continue
        if char == "[":
            i, last = _after_class(pattern, i), 1
            continue
        if char == "(":
            frames.append(1)
            i, last = i + 1, 1
            continue
        if char == ")" and len(frames) > 1:
            last = frames.pop()
            frames[-1] = max(frames[-1], last)
            i += 1
            continue
        count = _COUNT.match(pattern, i) if char == "{" else None
        if count is not None:
            low, high = count[1], count[2]
            bound = max(int(low[:7]), int(high[:7]) if high else 0)
            if bound > MAX_REPEAT:
                return f"a counted repeat of {low if not high else high} is more than {MAX_REPEAT}"
            last *= bound
            if last > MAX_REPEAT_PRODUCT:
                return f"nested counted repeats add up to more than {MAX_REPEAT_PRODUCT} copies"
            frames[-1] = max(frames[-1], last)
            i = count.end()
            continue
        i, last = i + 1, 1
    return None


def _after_class(pattern: str, start: int) -> int:
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1  # a leading ] is a literal
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """The pattern as the worker runs it (raises regex.error, or ValueError for repeats too large to compile)."""
    problem = repeat_refusal(pattern)
    if problem is not None:
        raise ValueError(problem)
    return regex.compile(pattern)


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
        if len(pattern) > MAX_PATTERN_LENGTH:
            problems.append(f"The pattern of {name!r} is longer than {MAX_PATTERN_LENGTH} characters.")
            continue
        try:
            compiled = compile_pattern(pattern)
        except (regex.error, ValueError, OverflowError) as exc:
            problems.append(f"The pattern of {name!r} is not a valid regex: {exc}.")
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
