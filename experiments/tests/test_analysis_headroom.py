"""The headroom curve (pure): the fitted line, the break-even accept length where it meets the baseline, the gain
sentence, and the accept lengths a study may simulate."""

from __future__ import annotations

import pytest

from experiments.analysis import break_even_accept_length
from experiments.analysis.headroom import CurvePoint, fit_line, headroom, level_curve
from experiments.charts.headroom import headroom_figure
from experiments.rules.headroom import accept_length_refusals, default_accept_lengths, env_value, simulated_length


def _model_points(baseline: float, needed: float, lengths: list[float]) -> list[CurvePoint]:
    """Points exactly on the break-even model: speedup = accept length / needed."""
    return [CurvePoint(al, baseline * al / needed, al / needed) for al in lengths]


def test_it_finds_the_break_even_model_s_accept_length_on_points_that_follow_it() -> None:
    model = break_even_accept_length(baseline_tok_s=80.0, concurrency=1, draft_ms=1.5, verify_ms=19.0, steps=2)
    points = _model_points(80.0, model.needed_accept_length, [1.5, 2.0, 2.5, 3.0])

    level = level_curve(1, 80.0, points, None)

    assert level.break_even == pytest.approx(model.needed_accept_length)
    assert level.tok_s_at(model.needed_accept_length) == pytest.approx(80.0)


def test_it_says_the_gain_of_the_next_length_half_a_token_better_with_intervals() -> None:
    simulated = [
        CurvePoint(1.5, 70.0, 0.70, 0.68, 0.72),
        CurvePoint(2.0, 93.0, 0.93, 0.91, 0.95),
        CurvePoint(2.5, 116.0, 1.16, 1.13, 1.19),
        CurvePoint(3.0, 119.0, 1.19, 1.15, 1.23),
    ]
    real = CurvePoint(2.4, 108.0, 1.08, 1.05, 1.11)
    levels = [level_curve(4, 300.0, simulated, None), level_curve(1, 100.0, simulated, real)]

    result = headroom(levels)

    assert [level.concurrency for level in result.levels] == [1, 4]
    assert result.accept_length == 2.4 and result.target == 3.0
    assert result.sentence == (
        "Raising accept length from 2.4 to 3.0 would give 1.19x [1.15, 1.23] at c=1 instead of 1.08x [1.05, 1.11]."
    )
    assert "breaks even at accept length" in result.break_even_sentence
    assert "the real draft measures 2.40, above it" in result.break_even_sentence


def test_it_names_a_swept_length_as_given() -> None:
    simulated = [CurvePoint(1.5, 70.0, 0.7), CurvePoint(2.25, 105.0, 1.05), CurvePoint(3.0, 140.0, 1.4)]

    result = headroom([level_curve(1, 100.0, simulated, CurvePoint(1.7, 80.0, 0.8))])

    assert result.sentence.startswith("Raising accept length from 1.7 to 2.25 would give 1.05x at c=1")


def test_it_says_when_the_real_draft_already_beats_every_simulated_length() -> None:
    simulated = [CurvePoint(1.5, 70.0, 0.7), CurvePoint(2.0, 93.0, 0.93)]
    real = CurvePoint(2.6, 120.0, 1.2)

    result = headroom([level_curve(1, 100.0, simulated, real)])

    assert result.target is None
    assert result.sentence.startswith("The real draft already accepts 2.60 tokens per step")


def test_it_has_no_break_even_without_a_rising_line() -> None:
    assert fit_line([(2.0, 1.0)]) is None
    flat = level_curve(1, 100.0, [CurvePoint(1.5, 90.0, 0.9), CurvePoint(2.5, 80.0, 0.8)], None)
    assert flat.break_even is None
    assert "not known" in headroom([flat]).break_even_sentence
    assert headroom([]).sentence.startswith("Not measured yet")


def test_its_figure_marks_the_break_even_on_the_baseline_and_the_real_draft() -> None:
    points = _model_points(80.0, 2.0, [1.5, 2.0, 3.0])
    level = level_curve(1, 80.0, points, CurvePoint(2.4, 96.0, 1.2))

    figure = headroom_figure([level], [1.5, 2.0, 3.0])

    traces = {trace["name"]: trace for trace in figure["data"]}
    assert traces["c=1 break-even"]["x"] == [pytest.approx(2.0)] and traces["c=1 break-even"]["y"] == [80.0]
    assert traces["c=1 real draft"]["x"] == [2.4]
    assert traces["c=1"]["x"] == [1.5, 2.0, 3.0]
    assert figure["layout"]["yaxis"].get("type") != "log"  # one concurrency: a linear axis from zero


def test_it_sweeps_from_one_and_a_half_to_steps_plus_one_within_bounds() -> None:
    assert default_accept_lengths(2) == [1.5, 2.0, 2.5, 3.0]
    assert default_accept_lengths(1) == [1.5, 2.0]
    assert len(default_accept_lengths(32)) <= 12
    assert accept_length_refusals([1.5, 3.0], 2) == []
    assert accept_length_refusals([0.5], 2)[0].startswith("Accept length 0.5 is outside 1 to 3")
    assert accept_length_refusals([3.5], 2) and accept_length_refusals([float("nan")], 2)
    assert accept_length_refusals([2.0, 2.0], 2) == ["Each accept length once."]
    assert accept_length_refusals([], 2) and accept_length_refusals([1.5] * 13, 20)
    assert env_value(2.0) == "2" and env_value(2.25) == "2.25"
    assert simulated_length({"SGLANG_SIMULATE_ACC_LEN": "2.5"}) == 2.5
    assert simulated_length({"SGLANG_SIMULATE_ACC_LEN": "-1"}) is None and simulated_length({}) is None
