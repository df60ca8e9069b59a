"""The experiment page and the API show each cell's acceptance three ways, with their definitions, and flag a cell
whose pooled and token-weighted figures disagree."""

from __future__ import annotations

import pytest

from experiments.models import Measurement, Run

from .factories import make_config, make_eagle_config, make_experiment, make_profile

pytestmark = pytest.mark.django_db


def _measured():
    experiment = make_experiment(
        profile=make_profile(concurrency=[1, 4], passes=1),
        baseline=make_config(name="baseline"),
        candidates=[make_eagle_config(name="eagle3")],
    )
    figures = {1: (2.50, 2.51, 2.44), 4: (2.40, 2.70, 2.39)}  # token-weighted, pooled, mean of requests
    for run in experiment.run_set.select_related("config"):
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
        for level in (1, 4):
            speculative = run.config.name == "eagle3"
            token, pooled, mean = figures[level] if speculative else (None, None, None)
            Measurement.objects.create(
                run=run, pass_index=0, concurrency=level, completed=8, duration_s=5.0,
                output_throughput=(120.0 if speculative else 100.0) * level, total_throughput=1.0,
                request_throughput=1.0, accept_length=token, pooled_accept_length=pooled,
                mean_request_accept_length=mean,
            )  # fmt: skip
    return experiment


def test_the_page_shows_three_figures_per_cell_with_their_definitions_and_flags_a_disagreement(client, viewer):
    experiment = _measured()
    client.force_login(viewer)

    page = client.get(experiment.get_absolute_url()).content.decode()

    table = page[page.index('id="acceptance-cells"') : page.index("</details>", page.index('id="acceptance-cells"'))]
    assert " open>" in table  # a disagreement opens the fold
    assert "token-weighted" in table and "pooled" in table and "mean of requests" in table
    assert "sglang:spec_verify_calls_total" in table  # the definition beside the figures
    assert "2.500" in table and "2.510" in table and "2.440" in table
    assert table.count('class="disagrees"') == 1 and "12.5% apart" in table


def test_the_api_gives_each_measurement_its_three_figures_and_the_disagreement(client, viewer):
    experiment = _measured()
    client.force_login(viewer)
    run = experiment.run_set.get(config__name="eagle3")

    measurements = client.get(f"/api/runs/{run.pk}").json()["measurements"]

    by_level = {m["concurrency"]: m for m in measurements}
    assert by_level[1]["pooled_accept_length"] == 2.51 and by_level[1]["mean_request_accept_length"] == 2.44
    assert by_level[1]["acceptance_disagreement"] is None
    assert "12.5% apart" in by_level[4]["acceptance_disagreement"]
