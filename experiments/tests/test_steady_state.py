"""Steady-state figures of each cell: stored with the measurement as the host's client reported them once checked (a
malformed one is null with a run warning, the rest of the cell kept), given by the API and the JSON export, and shown
on the experiment page beside the whole-cell throughput and acceptance, with their definition."""

from __future__ import annotations

import math
from typing import Any

import pytest

from experiments.actions.measurements import do_record_measurement
from experiments.analysis import steady_state
from experiments.models import Measurement, Run

from .factories import make_config, make_eagle_config, make_experiment, make_profile


def _result(**extra: Any) -> dict[str, Any]:
    return {
        "completed": 16,
        "failed": 0,
        "duration_s": 4.0,
        "output_throughput": 240.0,
        "total_throughput": 480.0,
        "request_throughput": 4.0,
        "accept_length": 2.4,
        "mean_ttft_ms": 12.0,
        "steady_state_output_throughput": 252.0,
        "steady_state_window_s": 3.5,
        "steady_state_accept_length": 2.5,
        **extra,
    }


@pytest.mark.parametrize(
    "bad",
    [math.nan, math.inf, -math.inf, -1.0, 10**400, "252.0", True, [252.0], {"value": 1}],
    ids=["nan", "inf", "-inf", "negative", "past-float", "text", "bool", "list", "object"],
)
def test_it_refuses_a_figure_that_is_not_a_finite_non_negative_number(bad: Any) -> None:
    figures, problems = steady_state.checked_figures(_result(steady_state_window_s=bad))

    assert figures == {
        "steady_state_output_throughput": 252.0,
        "steady_state_window_s": None,
        "steady_state_accept_length": 2.5,
    }
    assert problems == ["The cell's steady-state figures were not all stored: steady_state_window_s refused."]


def test_absent_or_null_figures_are_none_without_a_problem() -> None:
    assert steady_state.checked_figures({"completed": 3}) == (dict.fromkeys(steady_state.KEYS), [])
    assert steady_state.checked_figures(dict.fromkeys(steady_state.KEYS)) == (dict.fromkeys(steady_state.KEYS), [])
    assert steady_state.checked_figures(_result(steady_state_window_s=0))[0]["steady_state_window_s"] == 0.0


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
                do_record_measurement(run, 0, level, _result())
            else:  # a baseline: no accept length, and at c=4 no window held long enough
                steady = {"steady_state_accept_length": None, "accept_length": None}
                if level == 4:
                    steady |= {"steady_state_output_throughput": None, "steady_state_window_s": None}
                do_record_measurement(run, 0, level, _result(**steady))
    return experiment


def test_the_measurement_and_the_api_carry_the_steady_state_figures(measured, client, viewer):
    run = measured.run_set.get(config__name="eagle3")
    client.force_login(viewer)

    cells = client.get(f"/api/runs/{run.pk}").json()["measurements"]

    assert [(c["concurrency"], c["output_throughput"], c["steady_state_output_throughput"]) for c in cells] == [
        (1, 240.0, 252.0),
        (4, 240.0, 252.0),
    ]
    assert cells[0]["steady_state_window_s"] == 3.5 and cells[0]["steady_state_accept_length"] == 2.5
    baseline = measured.run_set.get(config__name="baseline")
    plain = client.get(f"/api/runs/{baseline.pk}").json()["measurements"]
    assert plain[0]["steady_state_output_throughput"] == 252.0 and plain[0]["steady_state_accept_length"] is None
    assert plain[1]["steady_state_window_s"] is None and plain[1]["steady_state_output_throughput"] is None
    assert Run.objects.get(pk=run.pk).warnings == []


def test_malformed_figures_are_stored_as_null_with_a_warning_and_the_rest_of_the_cell_is_kept(db, run, client, viewer):
    bad = _result(steady_state_output_throughput=math.nan, steady_state_window_s=-2.0, steady_state_accept_length="x")

    measurement = do_record_measurement(run, 0, 4, bad)

    measurement = Measurement.objects.get(pk=measurement.pk)
    assert measurement.output_throughput == 240.0 and measurement.accept_length == 2.4
    assert measurement.mean_ttft_ms == 12.0 and measurement.completed == 16
    assert measurement.steady_state_output_throughput is None and measurement.steady_state_window_s is None
    assert measurement.steady_state_accept_length is None
    assert measurement.raw["steady_state_output_throughput"] is None  # PostgreSQL's JSON has no NaN
    [warning] = Run.objects.get(pk=run.pk).warnings
    assert warning["kind"] == "host_output"
    assert warning["message"] == (
        "Concurrency 4, pass 1: The cell's steady-state figures were not all stored: steady_state_output_throughput, "
        "steady_state_window_s, steady_state_accept_length refused."
    )
    client.force_login(viewer)
    response = client.get(f"/api/runs/{run.pk}")
    assert response.status_code == 200 and response.json()["measurements"][0]["steady_state_window_s"] is None


def test_the_page_shows_them_beside_the_whole_cell_figures_with_their_definition(measured, client, viewer):
    client.force_login(viewer)

    page = client.get(measured.get_absolute_url()).content.decode()

    throughput = page[page.index('id="throughput"') : page.index("</section>", page.index('id="throughput"'))]
    assert "at least 80% of the concurrency in flight" in throughput and "ramp-up and tail left out" in throughput
    table = throughput[throughput.index('id="steady-cells"') :]
    assert "<th>whole cell tok/s</th><th>steady tok/s</th><th>change</th><th>window</th>" in table
    assert (
        "<td>eagle3</td><td>1</td><td>1</td><td>4</td><td>240.0</td><td><strong>252.0</strong></td><td>+5.0%</td>"
        "<td>3.50 of 4.00 s</td>"
    ) in table
    assert "<td>baseline</td><td>1</td><td>1</td><td>1</td>" in table
    assert "<td>baseline</td><td>1</td><td>1</td><td>4</td>" not in table  # no window qualified
    acceptance = page[page.index('id="acceptance"') : page.index("</table>", page.index('id="acceptance"'))]
    assert "<th>mean of requests</th><th>steady state</th>" in acceptance
    assert "<td>2.400</td><td>—</td><td>—</td><td>2.500</td>" in acceptance  # token-weighted, pooled, mean, steady
    assert "steady state" in page[page.index('id="acceptance-glossary"') :]


def test_the_json_export_carries_them_per_measurement(measured, client, owner):
    client.force_login(owner)

    exported = client.get(f"/experiments/{measured.pk}/export.json").json()

    rows = {(m["config"], m["concurrency"]): m for m in exported["measurements"]}
    assert rows[("eagle3", 4)]["steady_state_output_throughput"] == 252.0
    assert rows[("eagle3", 4)]["steady_state_window_s"] == 3.5
    assert rows[("eagle3", 4)]["steady_state_accept_length"] == 2.5
    assert rows[("baseline", 4)]["steady_state_window_s"] is None
