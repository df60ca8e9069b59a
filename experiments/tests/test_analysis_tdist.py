"""Student's t quantile against printed tables and closed forms."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.analysis import t_quantile

# Two-sided 95% critical values of Student's t, from printed tables.
T_TABLE = {1: 12.706, 2: 4.303, 4: 2.776, 10: 2.228, 30: 2.042}


def test_it_matches_table_t_quantiles() -> None:
    for df, expected in T_TABLE.items():
        assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.960, abs=1e-3)
    assert t_quantile(0.025, 4) == pytest.approx(-2.776, abs=1e-3)


@given(st.floats(0.501, 0.9999))
def test_it_matches_closed_form_quantiles_for_one_and_two_df(p: float) -> None:
    # df 1 is the Cauchy distribution; df 2 has an algebraic inverse.
    assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-6)
    assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-6)
