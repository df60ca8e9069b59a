"""The mean of a cell with its 95% Student t interval."""

import math

import pytest

from experiments.analysis import mean_interval

T_975_DF2 = 4.302652729749464  # Student's t, 97.5% quantile, 2 degrees of freedom


def test_it_gives_the_mean_and_the_t_interval_of_the_mean() -> None:
    mean, low, high = mean_interval([80.0, 82.0, 84.0])

    assert mean == 82.0
    # The sample standard deviation is 2, the standard error 2 / sqrt(3).
    assert low == pytest.approx(82.0 - T_975_DF2 * 2.0 / math.sqrt(3))
    assert high == pytest.approx(82.0 + T_975_DF2 * 2.0 / math.sqrt(3))


def test_it_gives_no_interval_for_a_single_value() -> None:
    assert mean_interval([88.8]) == (88.8, None, None)


def test_it_gives_an_empty_interval_for_identical_values() -> None:
    assert mean_interval([5.0, 5.0, 5.0, 5.0]) == (5.0, 5.0, 5.0)
