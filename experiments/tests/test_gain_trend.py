"""The gain at a fixed pace per user, launch by launch: each launch read from its own passes, at one pace fixed for
the whole history, on the page, in the API and in the export (hand-computed figures)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from experiments.analysis.deployment import Gain
from experiments.analysis.gain_trend import GainTrend, LaunchGain
from experiments.charts.deployment import gain_trend_figure
from experiments.models import ApiToken, Experiment, Run
from experiments.reads.reports import build_report

from .factories import make_config, make_eagle_config, make_experiment, make_measurement, make_profile

pytestmark = pytest.mark.django_db

# (output tok/s, mean TPOT ms) per config and concurrency; both configs run on tp 8.
CELLS = {
    "baseline": {1: (80.0, 12.0), 4: (300.0, 13.0)},
    "eagle3": {1: (94.0, 10.0), 4: (280.0, 12.5)},
}
NIGHT = datetime(2026, 11, 20, 2, 30, tzinfo=UTC)
JITTER = (0.995, 1.005, 0.995, 1.005)  # four passes a cell, 0.5% either side of the cell's value


def _experiment(candidate_scale: list[float]) -> Experiment:
    """One launch per entry of `candidate_scale`, a night apart; in launch i eagle3 serves CELLS x that factor."""
    experiment = make_experiment(
        baseline=make_config(name="baseline"),
        candidates=[make_eagle_config(name="eagle3")],
        profile=make_profile(concurrency=[1, 4], passes=len(JITTER), launches=len(candidate_scale)),
    )
    for run in experiment.run_set.select_related("config"):
        night = NIGHT + timedelta(days=run.launch_index)
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED, finished_at=night)
        scale = candidate_scale[run.launch_index] if run.config.name == "eagle3" else 1.0
        for level, (tok_s, tpot) in CELLS[run.config.name].items():
            for pass_index, jitter in enumerate(JITTER):
                value = tok_s * scale * jitter
                make_measurement(
                    run, concurrency=level, pass_index=pass_index, output_throughput=value, mean_tpot_ms=tpot
                )
    return experiment


def _gain(scale: float) -> float:
    """At the baseline's c=1 pace (1000 / 12 tok/s per user), the candidate's per-GPU throughput read log-linearly
    between its own points at 80 (c=4) and 100 (c=1) tok/s per user, over the baseline's 80 / 8."""
    pace = 1000 / 12
    low, high = (1000 / 12.5, 280.0 * scale / 8), (1000 / 10, 94.0 * scale / 8)
    weight = (pace - low[0]) / (high[0] - low[0])
    return math.exp(math.log(low[1]) + weight * (math.log(high[1]) - math.log(low[1]))) / (80.0 / 8)


def test_each_launch_is_read_at_one_pace_from_its_own_passes_and_a_slower_night_shows():
    trend = build_report(_experiment([1.0, 1.0, 0.9])).gain_trend

    assert trend is not None and (trend.baseline_concurrency, trend.target) == (1, pytest.approx(1000 / 12))
    launches = trend.candidates["eagle3"]
    assert [entry.launch for entry in launches] == [0, 1, 2]
    assert [entry.ended_at for entry in launches] == [NIGHT, NIGHT + timedelta(days=1), NIGHT + timedelta(days=2)]
    ratios = [entry.gain.ratio for entry in launches if entry.gain]
    assert ratios == [pytest.approx(_gain(1.0)), pytest.approx(_gain(1.0)), pytest.approx(_gain(0.9))]
    # Four passes a launch give each figure its interval, and the 10% slower night lies outside the others'.
    first, _, slower = (entry.gain for entry in launches)
    assert first is not None and slower is not None
    assert first.low is not None and first.high is not None and slower.high is not None
    assert first.low < first.ratio < first.high and slower.high < first.low
    assert trend.headlines == [
        f"At 83 tok/s per user (the baseline's pace at c=1), eagle3 served {_gain(1.0):.2f}x [{first.low:.2f}, "
        f"{first.high:.2f}] in launch 1 and {_gain(0.9):.2f}x [{slower.low:.2f}, {slower.high:.2f}] in launch 3, "
        f"between {_gain(0.9):.2f}x and {_gain(1.0):.2f}x over the 3 launches that reach it."
    ]


def test_one_launch_has_no_trend_and_a_launch_whose_curves_miss_the_pace_has_no_figure():
    assert build_report(_experiment([1.0])).gain_trend is None

    experiment = _experiment([1.0, 1.0])
    # The second night's candidate ran only at c=1, faster per user than the pace: nothing to read it at.
    experiment.run_set.filter(launch_index=1, config__name="eagle3").get().measurement_set.filter(
        concurrency=4
    ).delete()
    trend = build_report(experiment).gain_trend

    assert trend is not None and [e.gain is None for e in trend.candidates["eagle3"]] == [False, True]
    assert trend.headlines[0].endswith("over the 1 launches that reach it.")


def test_the_page_the_api_and_the_export_show_it(client, viewer):
    experiment = _experiment([1.0, 0.9])
    client.force_login(viewer)
    _, token = ApiToken.issue(viewer)

    page = client.get(experiment.get_absolute_url()).content.decode()
    api = client.get(f"/api/experiments/{experiment.pk}", headers={"Authorization": f"Bearer {token}"}).json()
    export = client.get(f"/experiments/{experiment.pk}/export.json").json()

    assert 'id="gain-trend-chart"' in page and "The gain at 83 tok/s per user, launch by launch" in page
    assert "2026-11-21 02:30" in page
    for body in (api, export):
        trend = body["gain_trend"]
        assert (trend["baseline"], trend["baseline_concurrency"], trend["interactivity"]) == ("baseline", 1, 83.333)
        (first, second) = trend["candidates"]["eagle3"]
        assert first["launch"] == 0 and first["ended_at"] == NIGHT.isoformat()
        assert first["ratio"] == pytest.approx(_gain(1.0)) and second["ratio"] == pytest.approx(_gain(0.9))
        assert first["low"] < first["ratio"] < first["high"]


def test_the_chart_draws_each_candidate_by_launch_with_names_escaped():
    gain = Gain(1.2, 1.1, 1.3, 80.0)
    trend = GainTrend("baseline", 1, 80.0, {"<b>x</b>": [LaunchGain(0, NIGHT, gain), LaunchGain(1, None, None)]})

    figure = gain_trend_figure(trend)

    (trace,) = figure["data"]
    assert trace["name"] == "&lt;b&gt;x&lt;/b&gt;" and trace["x"] == [1] and trace["y"] == [1.2]
    assert trace["error_y"]["array"] == [pytest.approx(0.1)] and trace["text"] == ["2026-11-20 02:30"]
    assert figure["layout"]["shapes"][0]["y0"] == 1
