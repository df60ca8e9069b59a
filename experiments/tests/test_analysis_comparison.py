"""Speedup of a candidate over the baseline: the interval, the verdict, runs needed, break-even concurrency."""

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.analysis import (
    FASTER,
    INCONCLUSIVE,
    MAX_RUNS_NEEDED,
    SLOWER,
    ComparisonRow,
    Sample,
    break_even_concurrency,
    compare,
)

# Two-sided 95% critical values of Student's t, from printed tables (not from `t_quantile`, so an error there shows).
T_TABLE = {1: 12.706, 4: 2.776, 10: 2.228}


def _samples(config: str, values: list[float], concurrency: int = 1) -> list[Sample]:
    return [Sample(config, concurrency, launch=0, pass_index=i, output_throughput=v) for i, v in enumerate(values)]


def _one_row(base: list[float], cand: list[float], **kwargs: float) -> ComparisonRow:
    rows = compare(_samples("base", base) + _samples("cand", cand), baseline="base", candidates=["cand"], **kwargs)
    assert len(rows) == 1
    return rows[0]


def _row(candidate: str, concurrency: int, speedup: float) -> ComparisonRow:
    return ComparisonRow(candidate, concurrency, 100.0, 100.0 * speedup, speedup, None, None, INCONCLUSIVE, 1, 1, None)


def test_it_matches_a_hand_computed_interval_with_equal_spreads() -> None:
    # The candidate is the baseline scaled by 1.1, so both log variances are equal and the Welch df is
    # exactly 2 (n - 1) = 4: the table value applies.
    base = [80.0, 82.0, 84.0]
    row = _one_row(base, [v * 1.1 for v in base])

    logs = [math.log(v) for v in base]
    mean = sum(logs) / 3
    var = sum((x - mean) ** 2 for x in logs) / 2
    half = T_TABLE[4] * math.sqrt(var / 3 + var / 3)
    assert row.speedup == pytest.approx(1.1)
    assert row.ci_low == pytest.approx(1.1 * math.exp(-half), rel=1e-4)
    assert row.ci_high == pytest.approx(1.1 * math.exp(half), rel=1e-4)
    assert row.baseline_tok_s == pytest.approx(82.0)
    assert row.candidate_tok_s == pytest.approx(90.2)
    assert (row.baseline_n, row.candidate_n) == (3, 3)


def test_it_uses_welch_degrees_of_freedom() -> None:
    # A baseline without spread leaves the candidate's n - 1 = 1 degree of freedom, not the pooled 2.
    row = _one_row([100.0, 100.0], [95.0, 105.0])
    # Two logs have sample sd |difference| / sqrt(2), so the standard error of their mean is |difference| / 2.
    half = T_TABLE[1] * abs(math.log(105) - math.log(95)) / 2
    centre = math.sqrt(95 * 105) / 100
    assert row.speedup == pytest.approx(centre)
    assert row.ci_low == pytest.approx(centre * math.exp(-half), rel=1e-4)
    assert row.ci_high == pytest.approx(centre * math.exp(half), rel=1e-4)
    assert row.verdict == INCONCLUSIVE


def test_it_matches_a_hand_computed_interval_with_ten_df() -> None:
    base = [81.0, 83.5, 82.2, 84.1, 80.7, 83.0]
    row = _one_row(base, [v * 0.7 for v in base])
    logs = [math.log(v) for v in base]
    half = T_TABLE[10] * math.sqrt(2 * statistics.variance(logs) / 6)
    assert row.ci_low == pytest.approx(0.7 * math.exp(-half), rel=1e-4)
    assert row.ci_high == pytest.approx(0.7 * math.exp(half), rel=1e-4)
    assert row.verdict == SLOWER


def test_it_calls_a_single_pass_inconclusive() -> None:
    row = _one_row([89.0], [94.0])
    assert row.speedup == pytest.approx(94 / 89)
    assert (row.ci_low, row.ci_high) == (None, None)
    assert row.verdict == INCONCLUSIVE
    assert row.runs_needed is None  # no spread known on either side


def test_it_calls_a_clear_win_faster() -> None:
    row = _one_row([83.1, 82.7, 83.5, 82.9, 83.3], [94.2, 93.8, 94.5, 93.9, 94.1])
    assert row.verdict == FASTER
    assert row.ci_low is not None and row.ci_low > 1
    assert row.speedup == pytest.approx(94.1 / 83.1, rel=1e-2)
    assert row.runs_needed is None


def test_it_calls_a_clear_loss_slower() -> None:
    row = _one_row([83.1, 82.7, 83.5, 82.9, 83.3], [60.2, 59.6, 60.8, 59.9, 60.4])
    assert row.verdict == SLOWER
    assert row.ci_high is not None and row.ci_high < 1
    assert row.runs_needed is None


def test_it_calls_a_significant_but_small_effect_inconclusive() -> None:
    # The interval excludes 1, but 1% is below the 2% minimum effect.
    base = [100.0, 100.1, 99.9, 100.0, 100.05]
    row = _one_row(base, [v * 1.01 for v in base])
    assert row.ci_low is not None and row.ci_low > 1
    assert row.verdict == INCONCLUSIVE
    assert row.runs_needed is None  # no number of runs makes 1% a 2% effect
    assert _one_row(base, [v * 1.01 for v in base], min_effect=0.005).verdict == FASTER


def test_it_estimates_runs_that_settle_a_noisy_result() -> None:
    row = _one_row([83.0, 85.0, 81.0, 84.0, 82.0], [85.0, 88.0, 82.0, 88.0, 84.0])
    assert row.verdict == INCONCLUSIVE
    assert row.runs_needed is not None and 5 < row.runs_needed < MAX_RUNS_NEEDED

    # Replay the same ratio and spread at that many samples per side: the verdict is now settled.
    n = row.runs_needed + row.runs_needed % 2  # even, for a symmetric two-point pattern
    base_logs = [math.log(v) for v in [83.0, 85.0, 81.0, 84.0, 82.0]]
    cand_logs = [math.log(v) for v in [85.0, 88.0, 82.0, 88.0, 84.0]]
    pooled_sd = math.sqrt((statistics.variance(base_logs) + statistics.variance(cand_logs)) / 2)
    step = pooled_sd * math.sqrt((n - 1) / n)  # so that the sample sd of +-step comes out as pooled_sd

    def replay(log_mean: float) -> list[float]:
        return [math.exp(log_mean + (step if i % 2 else -step)) for i in range(n)]

    settled = _one_row(replay(statistics.fmean(base_logs)), replay(statistics.fmean(cand_logs)))
    assert settled.speedup == pytest.approx(row.speedup)
    assert settled.verdict == FASTER


def test_it_caps_runs_needed() -> None:
    row = _one_row([50.0, 150.0, 90.0], [52.0, 153.0, 92.0])  # ~3% in a wide spread
    assert row.verdict == INCONCLUSIVE
    assert row.runs_needed == MAX_RUNS_NEEDED


def test_it_orders_rows_and_skips_unmatched_cells() -> None:
    samples = (
        _samples("base", [80.0, 81.0], concurrency=4)
        + _samples("base", [50.0, 51.0], concurrency=1)
        + _samples("b", [90.0], concurrency=1)
        + _samples("a", [60.0], concurrency=4)
        + _samples("a", [70.0], concurrency=1)
        + _samples("a", [75.0], concurrency=16)  # no baseline at 16
        + _samples("other", [1.0], concurrency=1)  # not asked for
    )
    rows = compare(samples, baseline="base", candidates=["b", "a", "missing"])
    assert [(r.candidate, r.concurrency) for r in rows] == [("b", 1), ("a", 1), ("a", 4)]
    assert rows[0].baseline_tok_s == pytest.approx(50.5)


def test_it_rejects_unusable_throughput_and_min_effect() -> None:
    with pytest.raises(ValueError, match="positive"):
        compare(_samples("base", [80.0, 0.0]), baseline="base", candidates=[])
    with pytest.raises(ValueError, match="min_effect"):
        compare([], baseline="base", candidates=[], min_effect=1.5)


def test_it_finds_the_break_even_concurrency() -> None:
    rows = [
        _row("eagle", 16, 0.97),
        _row("eagle", 1, 1.13),
        _row("eagle", 64, 0.90),
        _row("eagle", 4, 1.0),  # exactly even still pays
        _row("other", 2, 0.5),
    ]
    assert break_even_concurrency(rows, "eagle") == 16


def test_it_reports_no_break_even_when_speculation_always_pays() -> None:
    rows = [_row("eagle", 1, 1.2), _row("eagle", 8, 1.01)]
    assert break_even_concurrency(rows, "eagle") is None
    assert break_even_concurrency(rows, "absent") is None


def test_it_reports_the_first_level_when_speculation_never_pays() -> None:
    rows = [_row("eagle", 8, 0.8), _row("eagle", 2, 0.95)]
    assert break_even_concurrency(rows, "eagle") == 2


throughputs = st.lists(st.floats(1.0, 10_000.0), min_size=1, max_size=8)


@given(throughputs, throughputs)
def test_it_puts_the_point_estimate_inside_the_interval(base: list[float], cand: list[float]) -> None:
    row = _one_row(base, cand)
    assert row.speedup > 0
    if row.ci_low is None or row.ci_high is None:
        assert row.verdict == INCONCLUSIVE
    else:
        assert 0 < row.ci_low <= row.speedup <= row.ci_high


@given(throughputs, throughputs)
def test_it_inverts_the_ratio_when_sides_swap(base: list[float], cand: list[float]) -> None:
    samples = _samples("base", base) + _samples("cand", cand)
    (forward,) = compare(samples, baseline="base", candidates=["cand"])
    (backward,) = compare(samples, baseline="cand", candidates=["base"])
    assert backward.speedup == pytest.approx(1 / forward.speedup, rel=1e-9)
    assert backward.baseline_tok_s == forward.candidate_tok_s
    if forward.ci_low is None or forward.ci_high is None:
        assert backward.ci_low is None and backward.ci_high is None
    else:
        assert backward.ci_low == pytest.approx(1 / forward.ci_high, rel=1e-9)
        assert backward.ci_high == pytest.approx(1 / forward.ci_low, rel=1e-9)


@given(throughputs, throughputs, st.floats(1e-3, 1e3))
def test_it_ignores_a_common_scale(base: list[float], cand: list[float], scale: float) -> None:
    row = _one_row(base, cand)
    scaled = _one_row([v * scale for v in base], [v * scale for v in cand])
    assert scaled.speedup == pytest.approx(row.speedup, rel=1e-9)
    assert scaled.baseline_tok_s == pytest.approx(row.baseline_tok_s * scale, rel=1e-9)
    if row.ci_low is not None and row.ci_high is not None:
        assert scaled.ci_low == pytest.approx(row.ci_low, rel=1e-6)
        assert scaled.ci_high == pytest.approx(row.ci_high, rel=1e-6)
