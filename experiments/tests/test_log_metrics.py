"""Users' log-metric regexes: checked at submit, and read from the log within time budgets so that a catastrophic
pattern costs the worker milliseconds, not minutes (the issue's must-show: a 10,000-character line, <= 100 ms)."""

from __future__ import annotations

import time

import pytest

from experiments.rules import log_metrics
from experiments.rules.log_metrics import (
    MAX_METRICS,
    MAX_PATTERN_LENGTH,
    TIMEOUT_KIND,
    MetricReader,
    pattern_refusals,
    timeout_warning,
)

CATASTROPHIC = r"(?P<x>(a+)+)$"
EVIL_LINE = "a" * 10_000 + "b"
# The budgets are timed on this process's CPU clock (time.process_time): a pattern that backtracks spends CPU, and a
# loaded machine that schedules the test late does not (the wall clock read 194 ms for a 50 ms budget under load).


def test_it_reads_a_catastrophic_pattern_on_a_long_line_within_100_ms_and_switches_it_off():
    reader = MetricReader({"x": CATASTROPHIC, "verify_ms": r"Target verify: (?P<verify_ms>[\d.]+) ms"})

    started = time.process_time()
    batch = reader.read(1, [EVIL_LINE, "Target verify: 4.5 ms"])
    elapsed = time.process_time() - started

    assert elapsed <= 0.100, f"{elapsed * 1000:.1f} ms"
    assert batch.warnings == [(TIMEOUT_KIND, timeout_warning("x"))]
    assert batch.points == {"verify_ms": [[2, 4.5]]}  # the other metric still reads
    assert list(reader.patterns) == ["verify_ms"]
    started = time.process_time()
    assert reader.read(3, [EVIL_LINE]).warnings == []  # off: never tried again, never warned twice
    assert time.process_time() - started < 0.010


def test_it_bounds_a_batch_of_lines_that_are_each_just_under_the_line_budget():
    # Each line costs a few ms; many of them would add up to seconds without the batch budget.
    reader = MetricReader({"x": CATASTROPHIC}, line_budget=0.025, batch_budget=0.05)
    lines = ["a" * 100 + "b"] * 10_000  # ~5 ms each: 50 s for the batch, without the batch budget

    started = time.process_time()
    batch = reader.read(1, lines)

    assert time.process_time() - started <= 0.100
    assert batch.warnings == [(TIMEOUT_KIND, timeout_warning("x"))]


def test_it_keeps_a_metric_that_was_switched_off_before_a_reattach_off():
    reader = MetricReader({"x": CATASTROPHIC, "y": r"(?P<y>\d+)"}, disabled=["x"])

    assert list(reader.patterns) == ["y"]
    assert reader.read(5, ["7"]).points == {"y": [[5, 7.0]]}


def test_it_warns_once_about_a_stored_pattern_it_cannot_compile():
    reader = MetricReader({"bad": "(?P<bad>[unclosed", "y": r"(?P<y>\d+)"})

    first = reader.read(1, ["1"])

    assert [kind for kind, _ in first.warnings] == ["log_metric_invalid"]
    assert reader.read(2, ["2"]).warnings == []


def test_it_skips_matches_without_a_number():
    reader = MetricReader({"v": r"v=(?P<v>[\w.]+)|w=(?P<w>\d+)"})

    assert reader.read(1, ["v=abc", "w=3", "v=2.5"]).points == {"v": [[3, 2.5]]}


@pytest.mark.parametrize(
    ("metrics", "fragment"),
    [
        ([], "must be a JSON object"),
        ({"x": r"x=([\d.]+)"}, "needs a named group (?P<x>...)"),
        ({"x": "(?P<x>[unclosed"}, "not a valid regex"),
        ({"x": 3}, "must be a string"),
        ({"x": "(?P<x>a)" + "a" * MAX_PATTERN_LENGTH}, f"longer than {MAX_PATTERN_LENGTH}"),
        ({"not an identifier": "(?P<x>a)"}, "a metric name is an identifier"),
        ({f"m{i}": f"(?P<m{i}>a)" for i in range(MAX_METRICS + 1)}, f"At most {MAX_METRICS}"),
    ],
)
def test_it_refuses_patterns_at_submit(metrics, fragment):
    problems = pattern_refusals(metrics)

    assert any(fragment in p for p in problems), problems


def test_it_accepts_the_explanatory_models_metrics():
    from experiments.analysis.explanations import MODEL_METRICS

    assert pattern_refusals(dict(MODEL_METRICS)) == []
    assert pattern_refusals({"x": CATASTROPHIC}) == []  # legal; the reader's budgets deal with it


@pytest.mark.parametrize(
    "pattern",
    [
        "(?P<x>a{4294967294})",  # 20 characters that once made the web process allocate without bound
        "(?P<x>a{1000000})",
        "(?P<x>a{1001,})",
        "(?P<x>(a{100}){101})",  # small counts, nested into a large product
        "(?P<x>((ab{30}){30}){30})",
    ],
)
def test_it_refuses_counted_repeats_too_large_to_compile_before_compiling_them(pattern):
    started = time.process_time()
    (problem,) = log_metrics.pattern_refusals({"x": pattern})

    assert "counted repeat" in problem or "nested counted repeats" in problem
    assert time.process_time() - started < 0.05  # refused from the text: nothing was compiled
    with pytest.raises(ValueError):
        log_metrics.compile_pattern(pattern)  # the worker's path refuses it too


@pytest.mark.parametrize(
    "pattern",
    [
        r"(?P<x>verify (\d+\.\d+) ms)",
        r"(?P<x>\d{1,3}) steps",
        r"(?P<x>[{]1000000}\d+)",  # braces in a class are text
        r"(?P<x>\{1000000\}\d+)",  # escaped braces are text
        r"(?P<x>(\d{2}){3})",
    ],
)
def test_it_accepts_patterns_with_small_or_literal_counts(pattern):
    assert log_metrics.pattern_refusals({"x": pattern}) == []
