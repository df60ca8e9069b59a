"""The one Comparison (analysis/verdicts.py), pure: its gate rules, its reasons and how an interval is written."""

from __future__ import annotations

import random

import pytest

from experiments import analysis
from experiments.analysis import FASTER, INCONCLUSIVE, OUTPUTS_DIFFER, SLOWER, ComparisonRow, Sample
from experiments.analysis.intervals import ratio_bounds_text, ratio_text
from experiments.analysis.verdicts import FAILED, PASSED


def _row(candidate, verdict, speedup, low, high, *, speed_verdict="", n=3, runs_needed=None):
    return ComparisonRow(candidate, 1, 80.0, 80.0 * speedup, speedup, low, high, verdict, n, n, runs_needed,
                         speed_verdict)  # fmt: skip


def _comparison(*rows, passes=1, **extra):
    names = tuple(dict.fromkeys(row.candidate for row in rows))
    return analysis.Comparison("baseline", names, tuple(rows), passes, **extra)


def test_slower_fails_a_slower_verdict_passes_faster_and_settled_ties_and_waits_on_the_rest():
    rows = [
        _row("a", SLOWER, 0.8, 0.75, 0.85),
        _row("b", FASTER, 1.1, 1.05, 1.15),
        _row("c", INCONCLUSIVE, 1.01, 1.001, 1.02),  # above 1, below the minimum effect
        _row("d", INCONCLUSIVE, 1.0, 0.99, 1.01),  # more runs would not settle it
        _row("e", INCONCLUSIVE, 0.97, 0.9, 1.04, runs_needed=12),
        _row("f", OUTPUTS_DIFFER, 0.9, 0.85, 0.95, speed_verdict=SLOWER),
        _row("g", INCONCLUSIVE, 1.0, None, None, n=1),  # one sample a side: no spread known
    ]
    comparison = _comparison(*rows)

    gates = [comparison.slower_gate(row) for row in rows]

    assert [g.outcome for g in gates] == [FAILED, PASSED, PASSED, PASSED, INCONCLUSIVE, FAILED, INCONCLUSIVE]
    assert gates[0].message == "slower than the baseline: 0.80x [0.75, 0.85]"
    assert "needs ~12 samples per side" in gates[4].message


def test_an_acceptance_collapse_is_in_the_verdict_sentence_itself():
    samples = [Sample("baseline", 4, launch, 0, 100.0 + launch) for launch in range(3)]
    samples += [Sample("eagle3", 4, launch, 0, 56.0 + launch, accept_length=1.0) for launch in range(3)]

    comparison = analysis.judge(samples, baseline="baseline", candidates=["eagle3"], passes_per_launch=1)
    (row,) = comparison.rows
    (card,) = comparison.cards

    assert row.verdict == SLOWER
    assert comparison.collapsed(row) == pytest.approx(1.0)
    headline = comparison.headline or ""
    assert "acceptance collapsed" in headline and "accept length 1.00" in headline
    assert "acceptance collapsed at c=4 (accept length 1.00" in card.sentence
    assert any("acceptance collapsed" in reason for reason in comparison.reasons(row))


def test_a_healthy_accept_length_or_a_non_speculative_candidate_is_no_collapse():
    samples = [Sample("baseline", 1, launch, 0, 100.0 + launch) for launch in range(3)]
    samples += [Sample("eagle3", 1, launch, 0, 150.0 + launch, accept_length=2.8) for launch in range(3)]
    samples += [Sample("fp8", 1, launch, 0, 90.0 + launch, accept_length=1.0) for launch in range(3)]

    comparison = analysis.judge(
        samples, baseline="baseline", candidates=["eagle3", "fp8"], passes_per_launch=1, speculative=["eagle3"]
    )

    assert [comparison.collapsed(row) for row in comparison.rows] == [None, None]
    assert "collapsed" not in (comparison.headline or "")


def test_simulated_acceptance_is_shown_never_the_headline_and_never_gated_on_outputs():
    samples = [Sample("baseline", 1, launch, 0, 100.0 + launch) for launch in range(3)]
    samples += [Sample("real", 1, launch, 0, 110.0 + launch) for launch in range(3)]
    samples += [Sample("sim", 1, launch, 0, 180.0 + launch) for launch in range(3)]

    comparison = analysis.judge(
        samples, baseline="baseline", candidates=["real", "sim"], passes_per_launch=1,
        simulated=["sim"], outputs_differ=["sim"],
    )  # fmt: skip

    assert {row.candidate for row in comparison.rows} == {"real", "sim"}
    assert comparison.best is not None and comparison.best.candidate == "real"
    assert "sim" not in comparison.outputs_differ
    assert [row.verdict for row in comparison.rows if row.candidate == "sim"] == [FASTER]


def test_the_outputs_gate_says_why_it_cannot_judge():
    comparison = _comparison(
        _row("bug", OUTPUTS_DIFFER, 1.2, 1.1, 1.3), _row("ok", FASTER, 1.2, 1.1, 1.3),
        _row("unknown", FASTER, 1.2, 1.1, 1.3),
        outputs_differ=frozenset({"bug"}), outputs_match=frozenset({"ok"}), outputs_unjudged="the profile samples",
    )  # fmt: skip

    assert [comparison.outputs_gate(name).outcome for name in ("bug", "ok", "unknown")] == [
        FAILED,
        PASSED,
        INCONCLUSIVE,
    ]
    assert comparison.outputs_gate("unknown").message == "the profile samples"


@pytest.mark.parametrize(
    ("low", "high", "text"),
    [
        (0.991, 0.997, ("0.991", "0.997")),  # excludes 1: never "[0.99, 1.00]"
        (1.002, 1.03, ("1.002", "1.030")),  # excludes 1 from above
        (0.98, 1.15, ("0.98", "1.15")),  # holds 1: two decimals are honest
        (0.9996, 1.02, ("0.9996", "1.0200")),  # holds 1 from just below: never reads "[1.00, ...]" as if above
        (0.99999, 1.00001, ("0.9999", "1.0001")),  # past four decimals a bound is rounded away from 1
        (0.98643, 0.99998, ("0.9864", "0.9999")),  # ... so an interval below 1 never reads as reaching it
    ],
)
def test_an_interval_is_written_on_the_side_of_one_it_is(low, high, text):
    assert ratio_bounds_text(low, high) == text


def test_no_interval_that_excludes_one_reads_as_reaching_it():
    draws = random.Random(47)
    for _ in range(5000):
        low = draws.uniform(0.9, 1.1)
        high = low + draws.uniform(0.0001, 0.05)
        low_text, high_text = ratio_bounds_text(low, high)
        if low > 1 or high < 1:
            assert not (float(low_text) <= 1 <= float(high_text)), (low, high, low_text, high_text)
    assert ratio_text(0.994, 0.991, 0.997) == "0.994x [0.991, 0.997]"
    assert ratio_text(1.06, None, None) == "1.06x, no interval"
