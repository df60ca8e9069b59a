"""Acceptance per draft position: a cell's accepted-drafts histogram and the rates of draft 1, 2, 3 ... are stored
with the measurement as the host's client reported them, once checked (a malformed figure is null with a run
warning, the rest of the cell kept), given by the API and the JSON export, and shown on the experiment page per
config and concurrency and per prompt category, with their definitions."""

from __future__ import annotations

import math
from typing import Any

import pytest

from experiments.actions.measurements import do_record_measurement
from experiments.analysis import acceptance
from experiments.charts.positions import position_figure
from experiments.models import Measurement, Run

from .factories import make_config, make_eagle_config, make_experiment, make_profile


def _result(histogram: Any, rates: Any, categories: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    result = {
        "completed": 8,
        "failed": 0,
        "duration_s": 4.0,
        "output_throughput": 240.0,
        "total_throughput": 480.0,
        "request_throughput": 2.0,
        "accept_length": 2.4,
        "mean_ttft_ms": 12.0,
        "accepted_drafts_histogram": histogram,
        "position_acceptance": rates,
        **extra,
    }
    if categories is not None:
        result["categories"] = categories
    return result


GOOD = _result(
    [10, 20, 70],
    [0.9, 0.7],
    categories={
        "code": {"requests": 4, "accept_length": 2.8, "accepted_drafts_histogram": [2, 4, 34],
                 "position_acceptance": [0.95, 0.85]},
        "chat": {"requests": 4, "accept_length": 2.0, "accepted_drafts_histogram": [8, 16, 36],
                 "position_acceptance": [52 / 60, 0.6]},
    },
)  # fmt: skip


# --- the checks (pure) ------------------------------------------------------------------------------


def test_it_rates_each_position_as_the_share_of_verify_steps_that_accepted_at_least_that_many_drafts():
    assert acceptance.position_rates([10, 20, 70]) == pytest.approx([0.9, 0.7])
    assert acceptance.position_rates([5]) == []  # a step that could accept no draft has no position


def test_a_histogram_gives_the_tokens_per_verify_step_of_its_category():
    # 10 steps emitted 1 token, 20 emitted 2, 70 emitted 3: (10 + 40 + 210) / 100.
    assert acceptance.histogram_accept_length([10, 20, 70]) == pytest.approx(2.6)
    assert acceptance.histogram_accept_length([5]) == 1.0  # nothing drafted: the bonus token alone


@pytest.mark.parametrize(
    ("histogram", "rates"),
    [
        ([1, -1, 3], None),
        ([1, 2.0], None),
        ([True, 1], None),
        ([0, 0, 0], None),
        ([], None),
        ([1] * 66, None),
        ("10,20,70", None),
        ([10, 20, 70], [0.9, math.nan]),
        ([10, 20, 70], [0.9, math.inf]),
        ([10, 20, 70], [1.5, 0.7]),
        ([10, 20, 70], [0.7, 0.9]),  # rises with the position
        ([10, 20, 70], [0.9]),  # not what the histogram gives
        ([10, 20, 70], [0.9, "0.7"]),
        (None, [0.9, 0.7]),  # rates without the histogram they come from
    ],
)
def test_it_refuses_malformed_figures_with_a_reason(histogram, rates):
    fields, problems = acceptance.position_fields(
        {"accepted_drafts_histogram": histogram, "position_acceptance": rates}
    )

    assert fields["accepted_drafts_histogram"] is None and fields["position_acceptance"] is None
    assert len(problems) == 1 and problems[0].startswith("The cell's per-position acceptance was not stored: ")


def test_absent_figures_are_none_without_a_problem():
    fields, problems = acceptance.position_fields({"completed": 3, "categories": {"code": {"requests": 2}}})

    assert fields == dict.fromkeys(
        ["accepted_drafts_histogram", "position_acceptance", "position_acceptance_by_category"]
    )
    assert problems == []


def test_the_figure_draws_one_bar_group_per_config_and_concurrency():
    figure = position_figure([("eagle3 <b>", 1, [0.9, 0.7]), ("eagle3 <b>", 4, [0.8, 0.5])], colors={})

    assert [t["name"] for t in figure["data"]] == ["eagle3 &lt;b&gt; · c=1", "eagle3 &lt;b&gt; · c=4"]
    assert figure["data"][0]["x"] == ["draft 1", "draft 2"] and figure["data"][0]["y"] == [90.0, 70.0]
    assert figure["layout"]["barmode"] == "group" and figure["layout"]["yaxis"]["range"] == [0, 100]


# --- stored, served, shown --------------------------------------------------------------------------


@pytest.fixture
def measured(db):
    experiment = make_experiment(
        profile=make_profile(concurrency=[1, 4], passes=1),
        baseline=make_config(name="baseline"),
        candidates=[make_eagle_config(name="eagle3")],
    )
    for run in experiment.run_set.select_related("config"):
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
        for level in (1, 4):
            if run.config.name == "eagle3":
                do_record_measurement(run, 0, level, GOOD)
            else:
                do_record_measurement(run, 0, level, _result(None, None, accept_length=None))
    return experiment


def test_the_measurement_and_the_api_carry_the_histogram_and_the_rates(measured, client, viewer):
    run = measured.run_set.get(config__name="eagle3")
    client.force_login(viewer)

    cells = client.get(f"/api/runs/{run.pk}").json()["measurements"]

    assert [c["concurrency"] for c in cells] == [1, 4]
    assert cells[0]["accepted_drafts_histogram"] == [10, 20, 70]
    assert cells[0]["position_acceptance"] == pytest.approx([0.9, 0.7])
    assert cells[0]["position_acceptance_by_category"]["code"] == {
        "accepted_drafts_histogram": [2, 4, 34],
        "position_acceptance": pytest.approx([0.95, 0.85]),
    }
    baseline = measured.run_set.get(config__name="baseline")
    plain = client.get(f"/api/runs/{baseline.pk}").json()["measurements"][0]
    assert plain["accepted_drafts_histogram"] is None and plain["position_acceptance"] is None
    assert plain["position_acceptance_by_category"] is None
    assert Run.objects.get(pk=run.pk).warnings == []


def test_malformed_host_output_is_stored_as_null_with_a_warning_and_the_rest_of_the_cell_is_kept(
    db, experiment, run, client, viewer
):
    bad = _result(
        [10, -20, 70],
        [0.9, math.nan],
        categories={"code": {"requests": 4, "accept_length": 2.8, "accepted_drafts_histogram": [1] * 500,
                             "position_acceptance": [math.nan] * 499}},
    )  # fmt: skip

    measurement = do_record_measurement(run, 0, 4, bad)

    measurement = Measurement.objects.get(pk=measurement.pk)
    assert measurement.output_throughput == 240.0 and measurement.accept_length == 2.4
    assert measurement.mean_ttft_ms == 12.0 and measurement.completed == 8
    assert measurement.accepted_drafts_histogram is None and measurement.position_acceptance is None
    assert measurement.position_acceptance_by_category is None
    # Neither the raw copy keeps what failed (PostgreSQL's JSON has no NaN), nor do the category's other figures go.
    assert measurement.raw["position_acceptance"] is None
    assert measurement.raw["categories"]["code"] == {
        "requests": 4,
        "accept_length": 2.8,
        "accepted_drafts_histogram": None,
        "position_acceptance": None,
    }
    warnings = Run.objects.get(pk=run.pk).warnings
    assert [w["kind"] for w in warnings] == ["host_output", "host_output"]
    assert "Concurrency 4, pass 1: The cell's per-position acceptance was not stored" in warnings[0]["message"]
    assert "by prompt category was not stored" in warnings[1]["message"]

    client.force_login(viewer)
    response = client.get(f"/api/runs/{run.pk}")
    assert response.status_code == 200 and response.json()["measurements"][0]["position_acceptance"] is None


def test_the_page_shows_the_rates_per_config_concurrency_and_category_with_their_definitions(measured, client, viewer):
    client.force_login(viewer)

    page = client.get(measured.get_absolute_url()).content.decode()

    section = page[
        page.index('id="acceptance-positions"') : page.index("</details>", page.index('id="acceptance-positions"'))
    ]
    assert "share of verify steps that accepted draft token j" in section  # the definition beside the numbers
    assert "(2 config × concurrencies)" in section  # (never "concurrencys")
    table = section[section.index('id="positions"') : section.index("</table>", section.index('id="positions"'))]
    assert "<th>draft 1</th><th>draft 2</th>" in table
    assert "<td>eagle3</td><td>1</td><td>1</td><td>90.0%</td><td>70.0%</td>" in table
    assert "<td>eagle3</td><td>4</td>" in table and "baseline" not in table
    by_category = section[section.index('id="positions-by-category"') :]
    assert "<td>code</td><td>eagle3</td><td>1</td><td>95.0%</td><td>85.0%</td>" in by_category
    assert "<td>chat</td><td>eagle3</td><td>4</td><td>86.7%</td><td>60.0%</td>" in by_category
    assert 'data-figure="positions-figure"' in section and 'id="positions-figure" type="application/json"' in section
    assert "<script>" not in section  # figures are JSON data under the CSP, never inline script


def test_the_json_export_pools_each_config_and_concurrency(measured, client, owner):
    client.force_login(owner)

    exported = client.get(f"/experiments/{measured.pk}/export.json").json()

    cells = exported["position_acceptance"]["cells"]
    assert [(c["config"], c["concurrency"], c["cells"]) for c in cells] == [("eagle3", 1, 1), ("eagle3", 4, 1)]
    assert cells[0]["accepted_drafts_histogram"] == [10, 20, 70]
    assert cells[0]["position_acceptance"] == pytest.approx([0.9, 0.7])
    assert {c["category"] for c in exported["position_acceptance"]["by_category"]} == {"code", "chat"}
    speculative = [m for m in exported["measurements"] if m["config"] == "eagle3"]
    assert speculative[0]["position_acceptance"] == pytest.approx([0.9, 0.7])
