"""The comparison report and page: bands, break-even, accept length, latency, config diff, the explanatory model,
exports, and a constant number of queries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from experiments.models import Experiment, Measurement, Run, ServerConfig
from experiments.reads.reports import build_report
from experiments.serializers import experiment_export_json
from experiments.tests.factories import make_config, make_eagle_config, make_experiment, make_profile

pytestmark = pytest.mark.django_db

T_975_DF2 = 4.302652729749464  # Student's t, 97.5% quantile, 2 degrees of freedom


def _measure(run: Run, level: int, tok_s: float, pass_index: int = 0, **fields: Any) -> Measurement:
    latency = {
        "mean_ttft_ms": 40.0 * level,
        "p99_ttft_ms": 90.0 * level,
        "mean_tpot_ms": 12.0,
        "p99_tpot_ms": 20.0,
        "mean_itl_ms": 11.0,
        "p99_itl_ms": 30.0,
    }
    return Measurement.objects.create(
        run=run,
        pass_index=pass_index,
        concurrency=level,
        completed=16,
        duration_s=10.0,
        output_throughput=tok_s,
        total_throughput=2 * tok_s,
        request_throughput=1.0,
        **{**latency, **fields},
    )


def _finished(
    experiment: Experiment, cells: dict[str, dict[int, list[float]]], accept: dict[int, list[float]] | None = None
) -> Experiment:
    """Mark every run succeeded and store `cells[config name][level]` as that run's passes."""
    for run in experiment.run_set.select_related("config"):
        run.state = Run.State.SUCCEEDED
        run.save(update_fields=["state"])
        for level, values in cells.get(run.config.name, {}).items():
            for pass_index, tok_s in enumerate(values):
                accept_length = (accept or {}).get(level, [None] * len(values))[pass_index]
                _measure(
                    run, level, tok_s, pass_index, accept_length=accept_length if run.config.is_speculative else None
                )
    return experiment


def _two_config_experiment(**candidate_fields: Any) -> Experiment:
    baseline = make_config(name="baseline")
    candidate = make_eagle_config(name="eagle3-2step", **candidate_fields)
    profile = make_profile(concurrency=[1, 4], passes=3)
    experiment = make_experiment(baseline=baseline, candidates=[candidate], profile=profile)
    return _finished(
        experiment,
        {
            "baseline": {1: [80.0, 82.0, 84.0], 4: [300.0, 302.0, 304.0]},
            # 15% faster at 1, 15% slower at 4: the break-even concurrency is 4.
            "eagle3-2step": {1: [92.0, 94.0, 96.0], 4: [255.0, 257.0, 259.0]},
        },
        accept={1: [2.0, 2.1, 2.2], 4: [1.8, 1.8, 1.8]},
    )


def _traces(figure: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {trace["name"]: trace for trace in figure["data"]}


def test_it_draws_the_throughput_band_as_the_95_percent_interval_of_the_mean() -> None:
    report = build_report(_two_config_experiment())

    half_width = T_975_DF2 * 2.0 / 3**0.5  # sd 2 over 3 passes
    level, mean, low, high = report.throughput_series["baseline"][0]
    assert (level, mean) == (1, pytest.approx(82.0))
    assert (low, high) == (pytest.approx(82.0 - half_width), pytest.approx(82.0 + half_width))

    band = _traces(report.figures["throughput"])["baseline 95% CI"]
    assert band["fill"] == "toself"
    # Along the upper bounds, then back along the lower ones.
    assert band["x"] == [1, 4, 4, 1]
    assert band["y"] == pytest.approx([82 + half_width, 302 + half_width, 302 - half_width, 82 - half_width])
    assert {"baseline", "eagle3-2step", "eagle3-2step 95% CI"} <= set(_traces(report.figures["throughput"]))


def test_it_marks_the_break_even_concurrency_on_the_speedup_figure() -> None:
    report = build_report(_two_config_experiment())

    assert report.break_even == {"eagle3-2step": 4}
    traces = _traces(report.figures["speedup"])
    marker = traces["eagle3-2step: break-even at 4"]
    assert marker["x"] == [4]
    assert marker["y"] == [pytest.approx(traces["eagle3-2step"]["y"][1])]
    assert marker["marker"]["color"] == traces["eagle3-2step"]["line"]["color"]
    assert traces["eagle3-2step"]["error_y"]["visible"] is True
    assert report.figures["speedup"]["layout"]["shapes"][0]["y0"] == 1.0


def test_it_plots_accept_length_per_speculative_candidate() -> None:
    report = build_report(_two_config_experiment())

    assert list(report.accept_length_series) == ["eagle3-2step"]
    (one, four) = report.accept_length_series["eagle3-2step"]
    assert one[:2] == (1, pytest.approx(2.1))
    assert four == (4, pytest.approx(1.8), pytest.approx(1.8), pytest.approx(1.8))  # no spread, no width
    (trace,) = report.figures["accept_length"]["data"]
    assert trace["name"] == "eagle3-2step"
    assert trace["y"] == pytest.approx([2.1, 1.8])


def test_it_draws_mean_and_p99_latency_per_config_in_three_panels() -> None:
    report = build_report(_two_config_experiment())

    figure = report.figures["latency"]
    assert {"xaxis", "xaxis2", "xaxis3"} <= set(figure["layout"])
    traces = [t for t in figure["data"] if t["xaxis"] == "x" and t["legendgroup"] == "baseline"]
    assert [t["name"] for t in traces] == ["baseline", "baseline p99"]
    assert traces[0]["y"] == pytest.approx([40.0, 160.0])  # mean TTFT at 1 and 4
    assert traces[1]["y"] == pytest.approx([90.0, 360.0])
    assert traces[1]["line"]["dash"] == "dot"
    row = next(r for r in report.latency if r["config"] == "eagle3-2step" and r["concurrency"] == 4)
    assert (row["n"], row["mean_ttft_ms"], row["p99_itl_ms"], row["mean_e2e_latency_ms"]) == (3, 160.0, 30.0, None)


def test_its_latency_table_sets_the_servers_own_mean_e2e_latency_beside_the_clients() -> None:
    experiment = _two_config_experiment()
    Measurement.objects.filter(run__experiment=experiment, run__config__name="baseline", concurrency=1).update(
        mean_e2e_latency_ms=800.0, server_mean_e2e_latency_ms=770.0
    )

    rows = {(r["config"], r["concurrency"]): r for r in build_report(experiment).latency}

    assert (rows[("baseline", 1)]["mean_e2e_latency_ms"], rows[("baseline", 1)]["server_mean_e2e_latency_ms"]) == (
        800.0,
        770.0,
    )
    assert rows[("baseline", 4)]["server_mean_e2e_latency_ms"] is None  # a server without --enable-metrics


def test_it_highlights_only_the_config_fields_that_differ() -> None:
    experiment = _two_config_experiment(env={"NCCL_PROTO": "LL"}, tp_size=4)
    report = build_report(experiment)

    rows = {row.field: row for row in report.config_diff}
    assert rows["tp_size"].differs and [c.changed for c in rows["tp_size"].cells] == [False, True]
    assert [c.text for c in rows["env"].cells] == ["—", "NCCL_PROTO=LL"]
    assert not rows["model_path"].differs
    assert [c.text for c in rows["speculative_num_steps"].cells] == ["—", "2"]


def test_it_explains_the_result_with_the_break_even_accept_length(owner_client) -> None:
    experiment = _two_config_experiment()
    run = experiment.run_set.get(config__name="eagle3-2step")
    # Verify 18 ms and 3 ms of draft for the cycle's 2 steps at batch 1; later samples at batch 4 are left out.
    run.live_facts = {
        "decode": [{"n": 10, "running_req": 1}, {"n": 100, "running_req": 4}],
        "metrics": {
            "verify_ms": [[11, 17.0], [12, 18.0], [13, 19.0], [101, 40.0]],
            "draft_ms": [[11, 3.0], [12, 3.0], [101, 6.0]],
        },
    }
    run.save(update_fields=["live_facts"])

    model = build_report(experiment).models["eagle3-2step"]

    result = model.break_even
    assert result is not None
    assert model.concurrency == 1
    assert result.baseline_step_ms == pytest.approx(1000 / 82.0)  # baseline mean at concurrency 1
    assert (result.verify_ms, result.draft_ms, result.steps) == (18.0, 1.5, 2)
    assert result.needed_accept_length == pytest.approx(21.0 / (1000 / 82.0))
    assert result.accept_length == pytest.approx(2.1)
    assert result.predicted_speedup == pytest.approx(2.1 / (21.0 / (1000 / 82.0)))
    assert model.samples == 5 and model.batch_sizes == [1, 4]
    assert "logged at batch 1" in model.note

    page = owner_client.get(experiment.get_absolute_url()).content.decode()
    assert "needed to break even" in page
    assert f"{result.needed_accept_length:.2f}" in page
    assert result.message in page


def test_it_says_which_metrics_would_enable_the_model() -> None:
    experiment = _two_config_experiment()
    run = experiment.run_set.get(config__name="eagle3-2step")
    run.live_facts = {"decode": [], "metrics": {"verify_ms": [[3, 18.0]]}}
    run.save(update_fields=["live_facts"])

    model = build_report(experiment).models["eagle3-2step"]

    assert model.break_even is None
    assert model.missing == ["draft_ms"]
    assert "draft_ms" in model.note and "log_metrics" in model.note and "EAGLE3_PROFILE=1" in model.note


def test_it_renders_the_comparison_page_with_every_chart_table_and_export(owner_client) -> None:
    experiment = _two_config_experiment(tp_size=4)
    # One more noisy candidate, so a row stays inconclusive and asks for more runs.
    noisy = make_eagle_config(name="eagle3-noisy")
    experiment.candidate_set.create(config=noisy, position=1)
    run = experiment.run_set.create(config=noisy, host=experiment.host, sequence=9, state=Run.State.SUCCEEDED)
    for pass_index, tok_s in enumerate([70.0, 95.0, 105.0]):
        _measure(run, 1, tok_s, pass_index)

    response = owner_client.get(experiment.get_absolute_url())

    assert response.status_code == 200
    page = response.content.decode()
    for chart in ("throughput-chart", "speedup-chart", "accept-length-chart", "latency-chart"):
        assert f'id="{chart}"' in page
    for data in ("throughput-figure", "speedup-figure", "accept-length-figure", "latency-figure"):
        assert f'id="{data}"' in page
    assert "samples per side, has 3 and 3: about" in page and 'class="inline queue-needed"' in page
    assert f'href="/experiments/{experiment.pk}/export.csv"' in page
    tp_row = page[page.index('data-field="tp_size"') :].split("</tr>")[0]
    assert 'class="cfg-changed"' in tp_row
    model_row = page[page.index('data-field="model_path"') - 30 :].split("</tr>")[0]
    assert "cfg-same" in model_row and "cfg-changed" not in model_row


def test_it_gives_every_section_and_verdict_row_a_permalink(owner_client) -> None:
    experiment = _two_config_experiment()

    page = owner_client.get(experiment.get_absolute_url()).content.decode()

    for section in ("runs-card", "throughput", "speedup", "accept-length", "latency-card", "configs-card"):
        assert f'id="{section}"' in page and f'href="#{section}"' in page
    for level in (1, 4):
        row = page[page.index(f'<tr id="verdict-eagle3-2step-c{level}">') :].split("</tr>")[0]
        assert f'href="#verdict-eagle3-2step-c{level}"' in row
        assert "<td>eagle3-2step</td>" in row


def test_it_exports_every_table_as_json() -> None:
    experiment = _two_config_experiment()
    body = json.loads(json.dumps(experiment_export_json(build_report(experiment, with_figures=False)), allow_nan=False))

    assert {"comparison", "throughput", "accept_length", "latency", "models", "configs", "measurements"} <= set(body)
    assert len(body["measurements"]) == 12
    first = body["measurements"][0]
    assert (first["config"], first["run_state"], first["concurrency"]) == ("baseline", "succeeded", 1)
    assert first["mean_ttft_ms"] == 40.0
    assert body["throughput"]["baseline"][0]["low"] == pytest.approx(82.0 - T_975_DF2 * 2.0 / 3**0.5)
    assert body["configs"]["names"] == ["baseline", "eagle3-2step"]
    assert body["models"]["eagle3-2step"]["missing"] == ["verify_ms", "draft_ms"]
    assert len(body["latency"]) == 4


def _experiment_of_size(configs: int, levels: int) -> Experiment:
    candidates = [make_eagle_config(name=f"eagle3-{i}", log_metrics={"verify_ms": "x"}) for i in range(configs - 1)]
    profile = make_profile(concurrency=[2**k for k in range(levels)], passes=2)
    experiment = make_experiment(baseline=make_config(name="baseline"), candidates=candidates, profile=profile)
    facts = {"decode": [{"n": 1, "running_req": 1}], "metrics": {"verify_ms": [[2, 18.0]], "draft_ms": [[2, 3.0]]}}
    Run.objects.filter(experiment=experiment, config__speculative_algorithm="EAGLE3").update(live_facts=facts)
    cells = {
        config.name: {2**k: [80.0 * 2**k + i, 81.0 * 2**k + i] for k in range(levels)}
        for i, config in enumerate(
            ServerConfig.objects.filter(pk__in=[experiment.baseline_id, *[c.pk for c in candidates]])
        )
    }
    return _finished(experiment, cells, accept={2**k: [2.0, 2.1] for k in range(levels)})


def test_it_renders_the_page_in_a_constant_number_of_queries(owner_client) -> None:
    small, large = _experiment_of_size(2, 2), _experiment_of_size(10, 4)
    owner_client.get(small.get_absolute_url())  # the session's first request may differ

    counts = []
    for experiment in (small, large):
        cache.clear()  # the report as built, not as kept once finished (test_verdict_wording.py tests that)
        with CaptureQueriesContext(connection) as queries:
            response = owner_client.get(experiment.get_absolute_url())
        assert response.status_code == 200
        assert b"needed to break even" in response.content
        counts.append(len(queries))
    assert counts[0] == counts[1], counts
    # 10 for the report and whether it may be kept; the role's permissions (2, cached for the request); the audit
    # trail (1); the reproducibility notes: the runs' environments and GPU samples (2); the runs' per-prompt outputs
    # for the equivalence gate (1); the deployment cells' window ends (1: no window, so no power samples are read); the
    # acceptance headroom studies started from it or that it is (1); the adaptive schedules built from it or that it
    # verifies (1).
    assert counts[1] <= 19
