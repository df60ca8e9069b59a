"""The racing rule of a tuning study: leader, clearly worse configs, contenders, settled."""

import math

import pytest

from experiments.analysis import racing
from experiments.analysis.tdist import t_quantile


def test_it_pools_the_spread_of_repeated_configs_into_the_interval_of_a_config_measured_once() -> None:
    race = racing.race({"a": [100.0, 102.0], "b": [90.0]}, tolerance=0.02)

    sigma = abs(math.log(102) - math.log(100)) / math.sqrt(2)  # one degree of freedom
    half = t_quantile(0.975, 1) * sigma
    assert race.leader == "a"
    assert race.standings["b"].n == 1
    assert race.standings["b"].high == pytest.approx(90.0 * math.exp(half))


def test_it_eliminates_clearly_worse_configs_and_keeps_close_ones_in_contention() -> None:
    samples = {"base": [100.0, 104.0, 96.0, 102.0, 98.0], "fast": [112.0, 113.0], "close": [111.0], "slow": [80.0]}

    race = racing.race(samples, tolerance=0.02)

    assert race.leader == "fast"
    assert race.eliminated == {"base", "slow"}
    assert race.contenders == {"close"}
    assert not race.settled


def test_it_settles_once_the_leader_is_precise_and_nobody_can_beat_it_by_the_tolerance() -> None:
    samples = {"base": [100.0, 100.4, 99.6, 100.2], "fast": [112.0, 112.3, 111.8], "close": [111.5, 111.9]}

    race = racing.race(samples, tolerance=0.02)

    assert race.leader == "fast" and race.settled
    assert race.within("close", 0.02) and not race.within("base", 0.02)


def test_it_needs_two_launches_of_the_leader_and_uses_the_prior_before_any_repeat() -> None:
    race = racing.race({"a": [100.0], "b": [50.0]}, tolerance=0.02, prior_sigma=0.02)

    assert race.leader == "a" and race.eliminated == {"b"} and not race.settled
    assert race.standings["a"].high == pytest.approx(100 * 1.02 ** t_quantile(0.975, 1000))
    assert racing.race({}, tolerance=0.02).leader is None
    with pytest.raises(ValueError):
        racing.race({"a": [1.0]}, tolerance=0)
