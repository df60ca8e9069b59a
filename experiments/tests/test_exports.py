"""The downloads: an experiment's comparison (the same CSV from the page and the API, the JSON) and the flags."""

from __future__ import annotations

import csv
import io
import json

import pytest

from experiments.models import ApiToken, Experiment, Run

from .factories import make_config, make_eagle_config, make_experiment, make_history, make_measurement, make_run

pytestmark = pytest.mark.django_db


def _finished_experiment() -> Experiment:
    baseline, candidate = make_config(name="baseline"), make_eagle_config(name="eagle3-2step")
    experiment = make_experiment(baseline=baseline, candidates=[candidate], with_runs=False)
    for launch, (base_tok_s, cand_tok_s) in enumerate([(100.0, 120.0), (102.0, 123.0)]):
        for config, tok_s in ((baseline, base_tok_s), (candidate, cand_tok_s)):
            run = make_run(experiment=experiment, config=config, launch_index=launch, state=Run.State.SUCCEEDED)
            make_measurement(run, concurrency=1, output_throughput=tok_s)
    return experiment


def test_it_hands_out_the_same_comparison_csv_from_the_page_and_the_api(owner_client, client, owner):
    experiment = _finished_experiment()
    _, token = ApiToken.issue(owner)

    page = owner_client.get(f"/experiments/{experiment.pk}/export.csv")
    api = client.get(f"/api/experiments/{experiment.pk}/export.csv", headers={"Authorization": f"Bearer {token}"})

    assert page.status_code == api.status_code == 200
    assert page.content == api.content
    assert page["Content-Disposition"] == api["Content-Disposition"]
    assert page["Content-Disposition"] == f'attachment; filename="experiment-{experiment.pk}-comparison.csv"'
    rows = list(csv.DictReader(io.StringIO(page.content.decode())))
    assert [(r["candidate"], r["concurrency"], r["verdict"]) for r in rows] == [("eagle3-2step", "1", "faster")]
    assert "runs_needed" not in rows[0]


def test_it_exports_every_table_of_the_comparison_as_json_from_the_pages_link(owner_client):
    experiment = _finished_experiment()
    page = owner_client.get(f"/experiments/{experiment.pk}/")
    assert f'href="/experiments/{experiment.pk}/export.json" id="export-json"' in page.content.decode()

    response = owner_client.get(f"/experiments/{experiment.pk}/export.json")

    assert response["Content-Disposition"] == f'attachment; filename="experiment-{experiment.pk}.json"'
    body = json.loads(response.content)
    assert body["experiment"]["id"] == experiment.pk
    assert [row["candidate"] for row in body["comparison"]] == ["eagle3-2step"]
    assert len(body["measurements"]) == 4


def test_it_exports_the_flags_as_csv(owner_client):
    make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])

    response = owner_client.get("/flags/export.csv?state=open")

    rows = response.content.decode().splitlines()
    assert response["Content-Type"] == "text/csv"
    assert rows[0].startswith("id,created_at,host,config")
    assert len(rows) == 2 and ",regression,-0.07" in rows[1]
