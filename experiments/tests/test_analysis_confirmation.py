"""The two stages of a flag: suspicion from the newest values, confirmation by the values that come after."""

from __future__ import annotations

import math
import random

import pytest

from experiments import analysis


def _noisy(level: float, count: int, seed: int, noise: float = 0.02) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, noise)) for _ in range(count)]


def test_it_suspects_a_step_in_the_newest_values_and_not_a_stable_series():
    history = _noisy(100.0, 20, seed=1)

    assert analysis.suspect(history) is None
    found = analysis.suspect([*history, 92.0, 91.5])
    assert found is not None
    assert (found.index, found.direction) == (20, analysis.REGRESSION)
    assert found.shift < 0 and abs(found.min_shift) <= abs(found.shift)


def test_the_values_after_a_suspicion_decide_it_in_the_direction_they_support():
    found = analysis.suspect([*_noisy(100.0, 20, seed=1), 92.0])
    assert found is not None

    at_new_level = found.log_likelihood_ratio([92.5, 92.0])
    at_old_level = found.log_likelihood_ratio([100.2, 99.8])

    assert analysis.verdict(at_new_level, seen=2) == analysis.CONFIRMED
    assert analysis.verdict(at_old_level, seen=2) == analysis.DISMISSED
    assert found.log_likelihood_ratio([]) == 0.0
    with pytest.raises(ValueError):
        found.log_likelihood_ratio([0.0])


def test_verdict_uses_walds_thresholds_and_gives_up_after_its_patience():
    upper = math.log((1 - 0.05) / 0.025)
    assert analysis.verdict(upper + 0.01, false_confirm=0.025, miss=0.05) == analysis.CONFIRMED
    assert analysis.verdict(upper - 0.01, false_confirm=0.025, miss=0.05) == analysis.UNDECIDED
    assert analysis.verdict(0.0, seen=6, patience=6) == analysis.DISMISSED
    with pytest.raises(ValueError):
        analysis.verdict(0.0, false_confirm=0.7)


def test_the_values_of_a_dismissed_suspicion_are_neither_tail_nor_history():
    values = [*_noisy(100.0, 20, seed=2, noise=0.005), 85.0, 100.1]

    assert analysis.suspect_since(values, start=0) is not None  # the outlier is still among the newest
    assert analysis.suspect_since(values, start=0, dismissed=(20, 21)) is None
    stepped = [*values, 92.0, 91.8]
    index, found = analysis.suspect_since(stepped, start=0, dismissed=(20, 21)) or (None, None)
    assert index == 22 and found is not None and found.baseline_mean == pytest.approx(100.0, rel=0.01)


def test_a_watched_series_confirms_a_real_step_and_dismisses_an_outlier():
    watch = analysis.Watch()
    for value in _noisy(100.0, 20, seed=5, noise=0.01):
        assert watch.feed(value) == ""

    assert watch.feed(95.0) == analysis.SUSPECTED
    assert watch.needs_confirmation
    assert watch.feed(100.3, confirming=True) == analysis.DISMISSED
    assert not watch.needs_confirmation and not watch.flags

    outcomes = [watch.feed(value) for value in _noisy(94.0, 3, seed=4, noise=0.01)]
    while watch.needs_confirmation:
        outcomes.append(watch.feed(94.0, confirming=True))
    assert analysis.CONFIRMED in outcomes
    assert watch.flags is not None and [index for index, _ in watch.flags] == [22]
    assert watch.start == 22  # the new level is the reference from now on


def test_an_acceptance_series_is_suspected_and_confirmed_by_the_same_rule_as_throughput():
    # 2.9 tokens per verify step with the ~1.6% spread of a cell's accept length, then an upgrade that cut it.
    accept = [*_noisy(2.9, 20, seed=4, noise=0.016), 2.4]
    throughput = [value * 30 for value in accept]  # the same series in other units

    by_acceptance = analysis.suspect(accept, metric=analysis.ACCEPTANCE)
    by_throughput = analysis.suspect(throughput)

    assert by_acceptance is not None and by_throughput is not None
    # One rule: relative steps on the series' own spread, so the units change nothing but the words.
    assert (
        (by_acceptance.index, by_acceptance.direction)
        == (by_throughput.index, by_throughput.direction)
        == (20, "regression")
    )
    assert by_acceptance.score == pytest.approx(by_throughput.score)
    assert by_acceptance.log_likelihood_ratio([2.41]) == pytest.approx(by_throughput.log_likelihood_ratio([72.3]))
    assert by_acceptance.message.startswith("Accept length fell 17.")
    assert f"{by_acceptance.baseline_mean:.2f} -> 2.40 tokens/step" in by_acceptance.message
    assert "tok/s" in by_throughput.message and "Throughput fell" in by_throughput.message
    assert analysis.verdict(by_acceptance.log_likelihood_ratio([2.41]), seen=1) == analysis.CONFIRMED
    assert analysis.verdict(by_acceptance.log_likelihood_ratio([2.9]), seen=1) == analysis.DISMISSED


def test_a_quiet_acceptance_series_does_not_suspect_a_move_under_the_smallest_change():
    accept = _noisy(2.9, 20, seed=4, noise=0.002)  # far quieter than throughput: 0.2%

    assert analysis.suspect([*accept, 2.9 * 0.99], metric=analysis.ACCEPTANCE) is None  # 1%: under min_change
    assert analysis.suspect([*accept, 2.9 * 0.97], metric=analysis.ACCEPTANCE) is not None


def test_a_value_that_is_not_positive_is_refused_for_any_metric():
    with pytest.raises(ValueError, match="positive"):
        analysis.suspect([*_noisy(2.9, 10, seed=1), 0.0], metric=analysis.ACCEPTANCE)


def test_every_suspicion_may_be_decided_by_its_own_confirming_launches():
    # The bench's defaults: a suspicion waits at most PATIENCE values, and that many launches may be queued for it.
    assert analysis.MAX_CONFIRMATIONS == analysis.confirmation.PATIENCE
    watch = analysis.Watch()
    for value in _noisy(100.0, 20, seed=1):
        watch.feed(value)
    assert watch.feed(90.0) == analysis.SUSPECTED
    outcomes: list[str] = []
    while watch.needs_confirmation and not outcomes[-1:] == [analysis.DISMISSED]:
        outcomes.append(watch.feed(100.0, confirming=True))
    assert outcomes[-1] == analysis.DISMISSED and len(outcomes) <= analysis.MAX_CONFIRMATIONS
