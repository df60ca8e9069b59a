"""The experiment's deployment view: tokens per GPU against the pace a user sees, and each candidate's gain at the
baseline's pace, on the page, in the API and in the export (hand-computed figures)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from experiments.analysis import deployment, judge
from experiments.analysis.comparison import Sample, compare_configs
from experiments.analysis.deployment_view import WINDOW_NOT_RECORDED, deployment_view
from experiments.analysis.intervals import ratio_text
from experiments.models import ApiToken, Experiment, GpuSample, Measurement, Run, ServerConfig
from experiments.reads.reports import build_report
from experiments.serializers import deployment_json

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
        "At the same concurrency, c=1 each, eagle3 serves 1.18x the baseline's output tokens per second "
        "(inconclusive).",  # the comparison's own row, said first: each number says which question it answers
        f"At the same speed per user, 83 tok/s each (the baseline's at c=1, eagle3's between its c=1 and c=4), eagle3 "
        f"serves {_expected_gain():.2f}x the baseline's tokens per GPU.",  # one pass a cell: no interval
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
    assert "At the same speed per user, 83 tok/s each (the baseline&#x27;s at c=1, eagle3&#x27;s between" in page
    assert "1000 / the cell" in page  # the definitions are on the page
    for body in (api, export):
        deployment = body["deployment"]
        assert deployment["curves"]["baseline"][0]["tok_s_per_gpu"] == 10.0
        assert deployment["gains"]["eagle3"][0]["ratio"] == pytest.approx(_expected_gain())
        at_four = deployment["gains"]["eagle3"][1]
        assert {k: v for k, v in at_four.items() if k != "same_concurrency"} == {
            "baseline_concurrency": 4,
            "interactivity": 76.923,
            "ratio": None,
            "question": "at the same speed per user, 77 tok/s each",
            "candidate_concurrencies": [],
        }
        # The other question's answer beside it: the comparison's own row at c=4, as the verdict table has it.
        row = next(r for r in body["comparison"] if r["concurrency"] == 4)
        assert at_four["same_concurrency"]["question"] == "at the same concurrency, c=4 each"
        assert (at_four["same_concurrency"]["speedup"], at_four["same_concurrency"]["verdict"]) == (
            pytest.approx(row["speedup"], abs=1e-4), row["verdict"],
        )  # fmt: skip
        assert set(deployment["definitions"]) >= {
            "tok_s_per_gpu",
            "interactivity",
            "gain",
            "cost_per_million_output_tokens",
            "cost_per_million_input_tokens",
            "goodput",
            "slo_attainment",
            "joules_per_output_token",
        }


# Three passes a cell: (output tok/s, mean TPOT ms), a faster pass faster in both; both configs run on tp 8.
PASSES = {
    "baseline": {1: [(78.0, 12.2), (80.0, 12.0), (82.0, 11.8)], 4: [(295.0, 13.1), (300.0, 13.0), (305.0, 12.9)]},
    "eagle3": {1: [(92.0, 10.2), (94.0, 10.0), (96.0, 9.8)], 4: [(275.0, 12.6), (280.0, 12.5), (285.0, 12.4)]},
}


def test_each_number_says_which_question_it_answers_with_the_comparisons_own_at_the_same_concurrency():
    passes = [
        (name, level, index, tok_s, tpot)
        for name, cells in PASSES.items()
        for level, measured in cells.items()
        for index, (tok_s, tpot) in enumerate(measured)
    ]
    usable: list[dict[str, Any]] = [
        {"id": row, "run_id": 1 if name == "baseline" else 2, "run__config__name": name, "concurrency": level,
         "pass_index": index, "duration_s": 10.0, "output_throughput": tok_s, "input_throughput": None,
         "mean_tpot_ms": tpot}
        for row, (name, level, index, tok_s, tpot) in enumerate(passes)
    ]  # fmt: skip
    samples = [Sample(name, level, 0, index, tok_s) for name, level, index, tok_s, _ in passes]
    rows = compare_configs(samples, baseline="baseline", candidates=["eagle3"])
    baseline, eagle3 = ServerConfig(name="baseline", tp_size=8), ServerConfig(name="eagle3", tp_size=8)

    view = deployment_view(usable, baseline, [eagle3], rows=rows)

    assert view is not None
    level, pace, gain = view.gains["eagle3"][0]
    assert gain == deployment.gain_at_pace_of(view.curves["eagle3"], view.curves["baseline"][0])
    assert gain is not None and gain.low is not None and gain.high is not None
    row = rows[0]
    assert (row.concurrency, level) == (1, 1) and row.ci_low is not None and row.ci_high is not None
    assert view.headlines == [
        f"At the same concurrency, c=1 each, eagle3 serves {ratio_text(row.speedup, row.ci_low, row.ci_high)} "
        f"the baseline's output tokens per second ({row.verdict}).",
        f"At the same speed per user, {pace:.0f} tok/s each (the baseline's at c=1, eagle3's between its c=1 and "
        f"c=4), eagle3 serves {ratio_text(gain.ratio, gain.low, gain.high)} the baseline's tokens per GPU.",
    ]
    entry = deployment_json(view)["gains"]["eagle3"][0]
    assert entry == {
        "baseline_concurrency": 1,
        "interactivity": round(pace, 3),
        "ratio": gain.ratio,
        "low": gain.low,
        "high": gain.high,
        "question": f"at the same speed per user, {pace:.0f} tok/s each",
        "candidate_concurrencies": [1, 4],
        "same_concurrency": {
            "question": "at the same concurrency, c=1 each",
            "concurrency": 1,
            "speedup": row.speedup,
            "low": row.ci_low,
            "high": row.ci_high,
            "verdict": row.verdict,
        },
    }
    # Without the comparison's rows the view still says its own question, and only its own.
    alone = deployment_view(usable, baseline, [eagle3])
    assert alone is not None and alone.headlines == view.headlines[1:]


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
    assert deployment_json(view)["curves"]["baseline"][0]["cost_per_million_output_tokens"] == pytest.approx(
        55.555, rel=1e-4
    )
    assert 'id="deployment-cells"' in page and "55.56" in page
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
    # One pass each: no verdict settles, so the candidate is not called faster anywhere.
    assert view.headlines[-1] == (
        "Under the SLO (p90 TPOT ≤ 12.5 ms), eagle3 is not faster at c=1 (inconclusive) and meets the SLO up to c=4; "
        "baseline meets it up to c=1."
    )
    assert deployment_json(view)["slo"] == {"metric": "tpot", "percentile": "p90", "limit_ms": 12.5}


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


def _with_slo(experiment: Experiment) -> Experiment:
    Measurement.objects.update(p90_tpot_ms=12.0)
    profile = experiment.profile
    profile.slo_metric, profile.slo_percentile, profile.slo_limit_ms = "tpot", "p90", 12.5
    profile.save()
    experiment.refresh_from_db()
    return experiment


def test_a_cell_has_goodput_and_attainment_from_its_own_requests(client, viewer):
    experiment = _with_slo(_experiment())
    met = {"ok": True, "ttft_ms": 50.0, "itl_ms": 10.0, "e2e_latency_ms": 900.0}
    Measurement.objects.filter(run__config__name="baseline", concurrency=1).update(
        requests=[
            met | {"output_len": 100, "tpot_ms": 10.0},
            met | {"output_len": 50, "tpot_ms": 12.5},  # at the limit: met
            met | {"output_len": 100, "tpot_ms": 13.0},  # too slow
            {"ok": False, "output_len": 0, "ttft_ms": None, "tpot_ms": None, "itl_ms": None, "e2e_latency_ms": None},
        ]
    )

    view = build_report(experiment).deployment
    client.force_login(viewer)
    page = client.get(experiment.get_absolute_url()).content.decode()

    assert view is not None
    one = view.cells["baseline"][0]
    # 2 of the 4 requests met it, in the cell's 10 s: 0.2 req/s and (100 + 50) / 10 tok/s
    assert one.goodput is not None
    assert (one.goodput.requests_per_s, one.goodput.output_tok_s, one.goodput.attainment) == (0.2, 15.0, 0.5)
    assert one.slo_met is True  # its p90 TPOT, 12 ms, is within 12.5 ms
    assert view.cells["baseline"][1].goodput is None  # no request rows: no goodput, rather than a wrong one
    cell = deployment_json(view)["cells"]["baseline"][0]
    assert (cell["goodput_requests_per_s"], cell["slo_attainment"], cell["slo_requests_met"]) == (0.2, 0.5, 2)
    assert "0.500 (2 of 4)" in page and "on their own value" in page


def test_a_cell_has_its_energy_per_token_from_the_power_samples_and_says_why_not_when_they_leave_gaps():
    experiment = _experiment()
    baseline_run = experiment.run_set.get(config__name="baseline")
    end = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    one = Measurement.objects.get(run=baseline_run, concurrency=1)
    four = Measurement.objects.get(run=baseline_run, concurrency=4)
    Measurement.objects.filter(pk=one.pk).update(ended_at=end)
    Measurement.objects.filter(pk=four.pk).update(ended_at=end + timedelta(minutes=1))
    samples = []
    # c=1, a 10 s window: GPU 0 ramps from 200 W to 400 W (every 2.5 s), GPU 1 holds 100 W (a sample before and after).
    for seconds, watts in ((-10, 200.0), (-7.5, 250.0), (-5, 300.0), (-2.5, 350.0), (0, 400.0)):
        samples.append(GpuSample(run=baseline_run, at=end + timedelta(seconds=seconds), gpu=0, power_w=watts))
    for seconds in (-11, -8, -5, -2, 1):
        samples.append(GpuSample(run=baseline_run, at=end + timedelta(seconds=seconds), gpu=1, power_w=100.0))
    # c=4: GPU 0 only at its start, 4 s in and its end: 4 s and then 6 s unread, both over the 3 s allowed.
    for seconds in (-10, -6, 0):
        samples.append(GpuSample(run=baseline_run, at=end + timedelta(seconds=60 + seconds), gpu=0, power_w=300.0))
    GpuSample.objects.bulk_create(samples)

    view = build_report(experiment).deployment

    assert view is not None
    c1, c4 = view.cells["baseline"]
    # (300 W mean x 10 s + 100 W x 10 s) / (80 tok/s x 10 s)
    assert c1.energy.joules == pytest.approx(4000.0)
    assert c1.energy.joules_per_token == pytest.approx(5.0)
    assert c4.energy.joules_per_token is None
    assert c4.energy.gaps == (
        f"run {baseline_run.pk} pass 1: GPU 0: no power reading for 4.0 s (0.0 s to 4.0 s)",
        f"run {baseline_run.pk} pass 1: GPU 0: no power reading for 6.0 s (4.0 s to 10.0 s)",
    )
    eagle = deployment_json(view)["cells"]["eagle3"][0]
    assert eagle["joules_per_output_token"] is None and WINDOW_NOT_RECORDED in eagle["energy_gaps"][0]


def test_a_priced_host_gets_the_cost_per_million_input_tokens_too():
    experiment = _experiment()
    experiment.host.cost_per_gpu_hour = 2.0
    experiment.host.save(update_fields=["cost_per_gpu_hour"])
    Measurement.objects.filter(run__config__name="baseline", concurrency=1).update(input_throughput=40.0)
    experiment.refresh_from_db()

    view = build_report(experiment).deployment
    assert view is not None
    cell = deployment_json(view)["cells"]["baseline"][0]

    # 2.0 per GPU-hour x 8 GPUs / (40 input tok/s x 3600 s) x 1e6, beside the output's at 80 tok/s
    assert cell["cost_per_million_input_tokens"] == pytest.approx(2.0 * 8 / (40 * 3600) * 1e6)
    assert cell["cost_per_million_output_tokens"] == pytest.approx(2.0 * 8 / (80 * 3600) * 1e6)


def test_a_recorded_cell_keeps_its_checked_request_rows_and_its_windows_end_and_refuses_the_rest(client, viewer):
    from experiments.actions.measurements import do_record_measurement

    run = _experiment().run_set.get(config__name="baseline")
    good = {"index": 0, "ok": True, "output_len": 4, "ttft_ms": 9.0, "tpot_ms": 3.0, "itl_ms": 3.0}
    result = {
        "completed": 2,
        "duration_s": 1.0,
        "output_throughput": 8.0,
        "total_throughput": 16.0,
        "request_throughput": 2.0,
        "ended_at": 1_764_590_400.5,
        "requests": [good | {"e2e_latency_ms": 18.0, "output_ids": [1, 2, 3, 4]}, good | {"e2e_latency_ms": "1e999"}],
    }

    cell = do_record_measurement(run, 1, 1, result)
    client.force_login(viewer)
    api = client.get(f"/api/runs/{run.pk}").json()["measurements"]

    cell.refresh_from_db()
    assert cell.requests == [{k: v for k, v in good.items() if k != "index"} | {"e2e_latency_ms": 18.0}]
    assert cell.ended_at == datetime(2025, 12, 1, 12, 0, 0, 500000, tzinfo=UTC)
    assert "requests" not in cell.raw and "ended_at" not in cell.raw
    assert [w["kind"] for w in Run.objects.get(pk=run.pk).warnings] == ["host_output"]
    assert [m["ended_at"] for m in api if m["pass"] == 1] == ["2025-12-01T12:00:00.500000+00:00"]
    nowhere = do_record_measurement(run, 2, 1, result | {"ended_at": "yesterday", "requests": None})
    assert (nowhere.ended_at, nowhere.requests) == (None, [])


def test_the_fastest_by_engine_is_never_a_row_the_comparison_keeps_from_winning():
    """A vLLM candidate twice as fast whose outputs differ is not "the fastest" of its concurrency: the engine line
    names the fastest row the one comparison lets win (Comparison.may_win), as every headline does."""
    speeds = {"baseline": [80.0, 81.0, 79.0], "sglang": [96.0, 97.0, 95.0], "vllm": [160.0, 161.0, 159.0]}
    passes = [(name, i, v) for name, values in speeds.items() for i, v in enumerate(values)]
    usable: list[dict[str, Any]] = [
        {"id": n, "run_id": n, "run__config__name": name, "concurrency": 1, "pass_index": i, "duration_s": 10.0,
         "output_throughput": tok_s, "input_throughput": None, "mean_tpot_ms": 1000 / tok_s}
        for n, (name, i, tok_s) in enumerate(passes)
    ]  # fmt: skip
    samples = [Sample(name, 1, 0, i, v) for name, values in speeds.items() for i, v in enumerate(values)]
    comparison = judge(samples, baseline="baseline", candidates=["sglang", "vllm"], passes_per_launch=3,
                       outputs_differ=["vllm"])  # fmt: skip
    baseline = ServerConfig(name="baseline", tp_size=8)
    candidates = [ServerConfig(name="sglang", tp_size=8), ServerConfig(name="vllm", tp_size=8, engine="vllm")]

    honest = deployment_view(usable, baseline, candidates, rows=comparison.rows, may_win=comparison.may_win)
    assert honest is not None and honest.engine_headline is not None
    assert honest.engine_headline.startswith("Fastest by engine at each concurrency: c=1: sglang (SGLang), 1.2")
    unruled = deployment_view(usable, baseline, candidates, rows=comparison.rows)
    assert unruled is not None and "c=1: vllm (vLLM), 2.0" in str(unruled.engine_headline)
