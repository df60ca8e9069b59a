import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.analysis import (
    CHANGE_POINT,
    IMPROVEMENT,
    LOOKBACK,
    REGRESSION,
    assess_series,
    change_points,
    check_latest,
)

# Zero-mean relative wiggles of about 1%, so each segment's mean is exactly its level (segments are multiples of 4).
WIGGLE = [0.012, -0.008, 0.004, -0.008]


def _level(level: float, count: int) -> list[float]:
    assert count % len(WIGGLE) == 0
    return [level * (1 + WIGGLE[i % len(WIGGLE)]) for i in range(count)]


def _noisy(rng: random.Random, level: float, count: int, noise: float = 0.02) -> list[float]:
    return [level * (1 + rng.gauss(0, noise)) for _ in range(count)]


def test_it_flags_the_baseline_that_drifted_from_88_8_to_82_2() -> None:
    (flag,) = assess_series(_level(88.8, 16) + _level(82.2, 8))
    assert (flag.kind, flag.index, flag.direction) == (CHANGE_POINT, 16, REGRESSION)
    assert flag.change == pytest.approx(82.2 / 88.8 - 1)
    assert flag.change == pytest.approx(-0.074, abs=5e-4)
    assert flag.baseline_mean == pytest.approx(88.8)
    assert flag.new_value_or_mean == pytest.approx(82.2)
    assert flag.score < 0
    assert "fell 7.4%" in flag.message


def test_it_flags_the_drift_from_the_newest_values_before_a_change_point_can() -> None:
    # One value after the step is too few for change_points (min_segment 3); the lookback test sees it.
    values = [*_level(88.8, 16), 82.2]
    assert change_points(values) == []
    (flag,) = assess_series(values)
    assert (flag.kind, flag.index, flag.direction) == (LOOKBACK, 16, REGRESSION)
    assert flag.change == pytest.approx(82.2 / 88.8 - 1)
    assert flag.score <= -2.9


def test_it_reports_one_flag_when_both_tests_see_the_same_step() -> None:
    values = _level(88.8, 16) + _level(82.2, 4)
    assert check_latest(values) is not None
    assert [f.kind for f in assess_series(values)] == [CHANGE_POINT]


def test_it_does_not_flag_stable_series_at_two_percent_noise() -> None:
    rng = random.Random(1)
    assert assess_series(_noisy(rng, 83.0, 40)) == []
    # Across many series the false-alarm rate is about 1.7% per check (bench/regression_sim.py); allow for luck.
    flagged = sum(bool(assess_series(_noisy(rng, 83.0, rng.randint(10, 60)))) for _ in range(100))
    assert flagged <= 4


def test_it_labels_an_improvement() -> None:
    (flag,) = assess_series(_level(83.0, 12) + _level(94.0, 8))
    assert (flag.direction, flag.index) == (IMPROVEMENT, 12)
    assert flag.change == pytest.approx(94 / 83 - 1)
    assert flag.score > 0
    assert "rose" in flag.message


def test_it_catches_a_sudden_break_from_one_value() -> None:
    values = [*_level(83.0, 12), 60.0]
    flag = check_latest(values)
    assert flag is not None
    assert (flag.kind, flag.index, flag.direction) == (LOOKBACK, 12, REGRESSION)
    assert flag.new_value_or_mean == 60.0


def test_it_needs_min_history_before_the_newest_value() -> None:
    history = _level(83.0, 8)
    assert check_latest([*history[:7], 40.0], min_history=8) is None
    assert check_latest([*history, 40.0], min_history=8) is not None
    assert check_latest([*history, 40.0], min_history=9) is None
    assert check_latest([]) is None


def test_it_ignores_significant_changes_below_min_change() -> None:
    # 0.01% noise makes a 1% step overwhelmingly significant, but it is below the 2% that matters.
    rng = random.Random(3)
    values = _noisy(rng, 83.0, 20, noise=0.0001) + _noisy(rng, 83.0 * 0.99, 6, noise=0.0001)
    assert assess_series(values) == []
    flags = assess_series(values, min_change=0.005)
    assert [(f.index, f.direction) for f in flags] == [(20, REGRESSION)]


@pytest.mark.parametrize("seed", range(5))
def test_it_locates_a_step_within_one_value(seed: int) -> None:
    rng = random.Random(seed)
    flags = change_points(_noisy(rng, 100.0, 25) + _noisy(rng, 94.0, 20))
    assert len(flags) == 1
    assert abs(flags[0].index - 25) <= 1
    assert flags[0].direction == REGRESSION


def test_it_finds_several_changes_in_order() -> None:
    flags = change_points(_level(80.0, 12) + _level(90.0, 12) + _level(84.0, 12))
    assert [(f.index, f.direction) for f in flags] == [(12, IMPROVEMENT), (24, REGRESSION)]
    # Each change is measured against its neighbouring segments, not the whole series.
    assert flags[1].baseline_mean == pytest.approx(90.0)
    assert flags[1].change == pytest.approx(84 / 90 - 1)


def test_it_needs_two_segments_for_a_change_point() -> None:
    assert change_points([100.0, 100.0, 100.0, 50.0, 50.0]) == []
    assert [f.index for f in change_points([100.0, 100.0, 100.0, 50.0, 50.0, 50.0])] == [3]


def test_it_rejects_unusable_values_and_options() -> None:
    with pytest.raises(ValueError, match="positive"):
        assess_series([80.0, 0.0, 81.0])
    with pytest.raises(ValueError, match="positive"):
        check_latest([80.0, float("nan")])
    with pytest.raises(ValueError, match="min_segment"):
        change_points([1.0] * 10, min_segment=1)
    with pytest.raises(ValueError, match="min_history"):
        check_latest([1.0] * 10, min_history=30, lookback=20)


# Series with a level, up to 5% noise and at most one step, so that flags are common.
series = st.builds(
    lambda wiggles, at, step: [(1 + w) * (step if i >= at else 1.0) for i, w in enumerate(wiggles)],
    st.lists(st.floats(-0.05, 0.05), max_size=40),
    st.integers(0, 40),
    st.floats(0.8, 1.25),
)


@given(series, st.floats(1e-3, 1e3))
def test_it_ignores_a_common_scale(values: list[float], scale: float) -> None:
    flags = assess_series(values)
    scaled = assess_series([v * scale for v in values])
    assert [(f.index, f.kind, f.direction) for f in scaled] == [(f.index, f.kind, f.direction) for f in flags]
    for before, after in zip(flags, scaled, strict=True):
        assert after.change == pytest.approx(before.change, rel=1e-9, abs=1e-12)
        assert after.score == pytest.approx(before.score, rel=1e-6, abs=1e-9)
        assert after.baseline_mean == pytest.approx(before.baseline_mean * scale, rel=1e-9)


@given(series)
def test_it_keeps_flags_inside_the_series(values: list[float]) -> None:
    flags = assess_series(values)
    assert [f.index for f in flags] == sorted(f.index for f in flags)
    for flag in flags:
        assert 0 < flag.index < len(values)
        assert flag.kind in (LOOKBACK, CHANGE_POINT)
        assert flag.direction == (REGRESSION if flag.change < 0 else IMPROVEMENT)
        assert abs(flag.change) >= 0.02
