"""The experiment's deployment view: tokens per GPU against the pace a user sees, and each candidate's gain at the
baseline's pace, on the page, in the API and in the export (hand-computed figures)."""

from __future__ import annotations

import math

import pytest

from experiments.models import ApiToken, Experiment, Measurement, Run
from experiments.reads.reports import build_report

from .factories import make_config, make_eagle_config, make_experiment, make_measurement, make_profile

pytestmark = pytest.mark.django_db

# (output tok/s, mean TPOT ms) per config and concurrency; both configs run on tp 8.
CELLS = {
    "baseline": {1: (80.0, 12.0), 4: (300.0, 13.0)},
    "eagle3": {1: (94.0, 10.0), 4: (280.0, 12.5)},
}


def _experiment() -> Experiment:
    experiment = make_experiment(
        baseline=make_config(name="baseline"),
        candidates=[make_eagle_config(name="eagle3")],
        profile=make_profile(concurrency=[1, 4], passes=1),
    )
    for run in experiment.run_set.select_related("config"):
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
        for level, (tok_s, tpot) in CELLS[run.config.name].items():
            make_measurement(run, concurrency=level, output_throughput=tok_s, mean_tpot_ms=tpot)
    return experiment


def _expected_gain() -> float:
    """At the baseline's c=1 pace (1000 / 12 tok/s per user), the candidate's per-GPU throughput read log-linearly
    between its own points at 80 (c=4) and 100 (c=1) tok/s per user, over the baseline's 80 / 8."""
    pace = 1000 / 12
    low, high = (1000 / 12.5, 280.0 / 8), (1000 / 10, 94.0 / 8)
    weight = (pace - low[0]) / (high[0] - low[0])
    candidate = math.exp(math.log(low[1]) + weight * (math.log(high[1]) - math.log(low[1])))
    return candidate / (80.0 / 8)


def test_it_puts_tokens_per_gpu_against_the_pace_per_user_and_reads_the_gain_at_the_baselines_pace():
    view = build_report(_experiment()).deployment

    assert view is not None and view.gpus == {"baseline": 8, "eagle3": 8}
    (one, four) = view.curves["baseline"]
    assert (one.concurrency, one.tok_s_per_gpu, one.interactivity) == (1, 10.0, pytest.approx(1000 / 12))
    assert (four.tok_s_per_gpu, four.interactivity) == (37.5, pytest.approx(1000 / 13))
    (at_one, at_four) = view.gains["eagle3"]
    level, pace, gain = at_one
    assert (level, pace) == (1, pytest.approx(1000 / 12))
    assert gain is not None and gain.ratio == pytest.approx(_expected_gain())
    assert at_four == (4, pytest.approx(1000 / 13), None)  # slower per user than any measured point of eagle3
    assert view.headlines == [
        f"At 83 tok/s per user (the baseline's pace at c=1), eagle3 serves {_expected_gain():.2f}x the baseline's "
        "tokens per GPU."
    ]
    # The frontier: eagle3 at c=1 (fastest per user) and the baseline at c=4 (most per GPU); the rest is dominated.
    assert {(f.config, f.point.concurrency) for f in view.frontier} == {("eagle3", 1), ("baseline", 4), ("eagle3", 4)}


def test_the_page_the_api_and_the_export_show_it(client, viewer):
    experiment = _experiment()
    client.force_login(viewer)
    _, token = ApiToken.issue(viewer)

    page = client.get(experiment.get_absolute_url()).content.decode()
    api = client.get(f"/api/experiments/{experiment.pk}", headers={"Authorization": f"Bearer {token}"}).json()
    export = client.get(f"/experiments/{experiment.pk}/export.json").json()

    assert 'id="frontier-chart"' in page and "the baseline&#x27;s tokens per GPU" in page
    assert "1000 / the cell" in page  # the definitions are on the page
    for body in (api, export):
        deployment = body["deployment"]
        assert deployment["curves"]["baseline"][0]["tok_s_per_gpu"] == 10.0
        assert deployment["gains"]["eagle3"][0]["ratio"] == pytest.approx(_expected_gain())
        assert deployment["gains"]["eagle3"][1] == {"baseline_concurrency": 4, "interactivity": 76.923, "ratio": None}
        assert set(deployment["definitions"]) == {
            "tok_s_per_gpu",
            "interactivity",
            "gain",
            "cost_per_million_output_tokens",
        }


def test_there_is_no_view_before_the_baseline_has_a_tpot():
    experiment = _experiment()
    Measurement.objects.filter(run__config__name="baseline").update(mean_tpot_ms=None)

    assert build_report(experiment).deployment is None


def test_the_frontier_chart_draws_each_config_and_rings_the_best_points_with_names_escaped():
    experiment = _experiment()
    experiment.candidates.update(name="<b>eagle3</b>")  # a name is the user's: it reaches the chart escaped

    figure = build_report(experiment).figures["frontier"]

    names = [trace["name"] for trace in figure["data"]]
    assert names == ["baseline", "&lt;b&gt;eagle3&lt;/b&gt;", "best (frontier)"]
    baseline = figure["data"][0]
    assert baseline["x"] == pytest.approx([1000 / 13, 1000 / 12]) and baseline["y"] == [37.5, 10.0]
    assert baseline["text"] == ["c=4", "c=1"] and baseline["line"]["dash"] == "dash"
    assert "&lt;b&gt;eagle3&lt;/b&gt;" in figure["data"][2]["text"]


def test_a_host_with_a_gpu_hour_price_gets_the_cost_per_million_output_tokens(client, viewer):
    experiment = _experiment()
    experiment.host.cost_per_gpu_hour = 2.0
    experiment.host.save(update_fields=["cost_per_gpu_hour"])
    experiment.refresh_from_db()

    view = build_report(experiment).deployment
    client.force_login(viewer)
    page = client.get(experiment.get_absolute_url()).content.decode()

    assert view is not None
    # 2.0 per GPU-hour x 8 GPUs / (80 tok/s x 3600 s) x 1e6 tokens
    assert dict(view.cost_rows)["baseline"][0] == (1, pytest.approx(2.0 * 8 / (80 * 3600) * 1e6))
    assert view.as_json()["curves"]["baseline"][0]["cost_per_million_output_tokens"] == pytest.approx(55.555, rel=1e-4)
    assert 'id="deployment-cost"' in page and "55.56" in page
    unpriced = build_report(_experiment()).deployment
    assert unpriced is not None and unpriced.cost_rows == []  # no price, no costs


def test_a_profiles_slo_says_up_to_which_concurrency_each_config_meets_it():
    experiment = _experiment()
    # p90 TPOT <= 12.5 ms: the baseline's is 12 at c=1 and 13 at c=4; eagle3's 10 and 12.5 (at the limit: met).
    for name, level, p90 in (("baseline", 1, 12.0), ("baseline", 4, 13.0), ("eagle3", 1, 10.0), ("eagle3", 4, 12.5)):
        Measurement.objects.filter(run__config__name=name, concurrency=level).update(p90_tpot_ms=p90)
    profile = experiment.profile
    profile.slo_metric, profile.slo_percentile, profile.slo_limit_ms = "tpot", "p90", 12.5
    profile.save()
    experiment.refresh_from_db()

    view = build_report(experiment).deployment

    assert view is not None and view.slo_reach == {"baseline": 1, "eagle3": 4}
    assert view.headlines[-1] == "Under the SLO (p90 TPOT ≤ 12.5 ms): baseline up to c=1; eagle3 up to c=4."
    assert view.as_json()["slo"] == {"metric": "tpot", "percentile": "p90", "limit_ms": 12.5}


@pytest.mark.parametrize(
    ("fields", "error_on"),
    [
        ({"slo_metric": "tpot"}, "slo_percentile"),
        ({"slo_metric": "tpot", "slo_percentile": "p90", "slo_limit_ms": -1}, "slo_limit_ms"),
        ({"slo_metric": "rm -rf", "slo_percentile": "p90", "slo_limit_ms": 50}, "slo_metric"),
    ],
)
def test_a_profile_takes_an_slo_whole_or_not_at_all(fields, error_on):
    from experiments.forms.profiles import BenchmarkProfileForm
    from experiments.forms.submission import apply_profile_defaults, profile_form_data

    form = BenchmarkProfileForm(profile_form_data(apply_profile_defaults(fields)))

    assert not form.is_valid() and error_on in form.errors
    whole = BenchmarkProfileForm(
        profile_form_data(
            apply_profile_defaults({"slo_metric": "e2e_latency", "slo_percentile": "p99", "slo_limit_ms": 900})
        )
    )
    assert whole.is_valid(), whole.errors
    assert whole.save_unsaved(name="p").slo is not None
