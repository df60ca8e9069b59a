"""History checks after each result, the flags review queue, triage, pinned baselines and re-runs."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from experiments.actions.review import do_check_history, do_pin_baseline
from experiments.models import ApiToken, Flag, FlagComment, PinnedBaseline, Run

from .factories import make_config, make_experiment, make_host, make_measurement, make_profile, make_run

pytestmark = pytest.mark.django_db


def _history(values: list[float], *, host=None, config=None) -> list[Run]:
    """One finished experiment per value, the same baseline config, host and profile, checked as it lands."""
    host = host or make_host()
    config = config or make_config(name="baseline")
    start = timezone.now() - timedelta(days=len(values))
    runs = []
    for i, value in enumerate(values):
        experiment = make_experiment(host=host, baseline=config, candidates=[], profile=make_profile(), with_runs=False)
        run = make_run(experiment=experiment, state=Run.State.SUCCEEDED, finished_at=start + timedelta(hours=i))
        for pass_index in range(3):
            make_measurement(run, concurrency=1, output_throughput=value, pass_index=pass_index)
        do_check_history(run)
        runs.append(run)
    return runs


def test_it_flags_the_baseline_that_silently_moved_from_88_8_to_82_2():
    noise = random.Random(7)
    values = [88.8 * (1 + noise.gauss(0, 0.005)) for _ in range(10)] + [
        82.2 * (1 + noise.gauss(0, 0.005)) for _ in range(3)
    ]

    runs = _history(values)

    flags = list(Flag.objects.all())
    assert len(flags) == 1, [(f.kind, f.run_id, f.change) for f in flags]
    flag = flags[0]
    assert flag.direction == "regression"
    assert flag.change == pytest.approx(-0.074, abs=0.01)
    assert flag.run_id == runs[10].pk  # the first run at the new level
    assert flag.triage == Flag.Triage.UNTRIAGED
    assert flag.concurrency == 1 and flag.profile_label.startswith("128 in / 128 out")


def test_it_leaves_a_stable_series_alone():
    noise = random.Random(3)

    _history([90 * (1 + noise.gauss(0, 0.01)) for _ in range(25)])

    assert not Flag.objects.exists()


def test_it_labels_an_improvement():
    _history([80.0, 80.4, 79.8, 80.1, 80.2, 79.9, 80.0, 80.3, 80.1, 86.0, 86.3, 85.8])

    assert [f.direction for f in Flag.objects.all()] == ["improvement"]


def test_it_keeps_series_of_different_hosts_apart():
    config = make_config(name="baseline")
    _history([88.8] * 10, config=config)
    _history([82.2] * 3, config=config)  # another host: its own series, too short to judge

    assert not Flag.objects.exists()


def test_it_lists_open_flags_and_triages_one_with_a_comment(owner_client, owner, member):
    _history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])
    flag = Flag.objects.get()

    listing = owner_client.get("/flags/")
    assert listing.status_code == 200
    assert f"/flags/{flag.pk}/" in listing.content.decode()
    nav = listing.content.decode().split('id="nav-flags"')[1].split("</a>")[0]
    assert '<span class="badge" title="1 regression flag to triage">1</span>' in nav

    page = owner_client.get(f"/flags/{flag.pk}/")
    assert page.status_code == 200
    assert b"history-figure" in page.content

    response = owner_client.post(
        f"/flags/{flag.pk}/", {"triage": "acknowledged", "assignee": member.pk, "comment": "GPU 3 throttles"}
    )
    assert response.status_code == 302
    flag.refresh_from_db()
    assert (flag.triage, flag.assignee) == ("acknowledged", member)
    comment = FlagComment.objects.get()
    assert comment.author == owner and "GPU 3 throttles" in comment.text and "untriaged -> acknowledged" in comment.text

    assert "badge" not in owner_client.get("/").content.decode().split('id="nav-flags"')[1].split("</a>")[0]
    owner_client.post(f"/flags/{flag.pk}/", {"triage": "fixed", "comment": ""})
    assert flag.pk not in [f.pk for f in owner_client.get("/flags/").context["flags"]]
    assert flag.pk in [f.pk for f in owner_client.get("/flags/?state=fixed").context["flags"]]


def test_it_refuses_an_unknown_triage_state(owner_client):
    _history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])
    flag = Flag.objects.get()

    response = owner_client.post(f"/flags/{flag.pk}/", {"triage": "wontfix"})

    assert response.status_code == 200
    assert b"Select a valid choice" in response.content
    flag.refresh_from_db()
    assert flag.triage == "untriaged"


def test_it_shows_a_series_and_pins_it_as_the_baseline(owner_client, owner):
    runs = _history([88.8, 88.9, 88.7])
    run = runs[0]
    url = f"/history/{run.host_id}/{run.config.content_hash}/{run.experiment.profile.series_key}/"

    assert owner_client.get(url).status_code == 200
    response = owner_client.post(url + "pin/")

    assert response.status_code == 302
    pinned = PinnedBaseline.objects.get()
    assert (pinned.host_id, pinned.config.content_hash) == (run.host_id, run.config.content_hash)
    assert b"pinned baseline" in owner_client.get(url).content


def test_it_requires_login_for_the_review_pages(client):
    runs = _history([88.8, 88.9])
    run = runs[0]
    for url in ["/flags/", f"/history/{run.host_id}/{run.config.content_hash}/{run.experiment.profile.series_key}/"]:
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_it_reruns_an_experiment_with_more_interleaved_launches(owner_client, client, owner):
    experiment = make_experiment()  # baseline + one candidate, one launch each
    assert owner_client.post(f"/experiments/{experiment.pk}/rerun/", {"launches": 2}).status_code == 302

    runs = list(experiment.run_set.order_by("sequence").values_list("config__name", "launch_index", "sequence"))
    names = [name for name, _, _ in runs]
    assert names == [names[0], names[1]] * 3
    assert [launch for _, launch, _ in runs] == [0, 0, 1, 1, 2, 2]

    _, token = ApiToken.issue(owner)
    response = client.post(
        f"/api/experiments/{experiment.pk}/rerun",
        {"launches": 1},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 201
    assert len(response.json()["runs"]) == 2
    bad = client.post(
        f"/api/experiments/{experiment.pk}/rerun",
        {"launches": 0},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert bad.status_code == 422


def test_it_reports_the_flags_of_an_experiment_in_the_api(client, owner):
    runs = _history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])
    _, token = ApiToken.issue(owner)

    body = client.get(f"/api/experiments/{runs[9].experiment_id}", headers={"Authorization": f"Bearer {token}"}).json()

    assert [(f["direction"], f["concurrency"], f["triage"]) for f in body["flags"]] == [("regression", 1, "untriaged")]
    assert body["flags"][0]["change"] == pytest.approx(-0.074, abs=0.005)


def test_it_exports_the_flags_as_csv(owner_client):
    _history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])

    response = owner_client.get("/flags/export.csv?state=open")

    rows = response.content.decode().splitlines()
    assert response["Content-Type"] == "text/csv"
    assert rows[0].startswith("id,created_at,host,config")
    assert len(rows) == 2 and ",regression,-0.07" in rows[1]


def test_it_says_on_the_experiment_page_whether_its_baseline_is_the_pinned_one(owner_client, owner):
    runs = _history([88.8, 88.9])
    experiment = runs[0].experiment
    page = owner_client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "No baseline is pinned" in page

    do_pin_baseline(
        host=experiment.host, profile=experiment.profile, config=make_config(name="other", tp_size=2), user=owner
    )
    assert "Not the pinned baseline" in owner_client.get(f"/experiments/{experiment.pk}/").content.decode()

    do_pin_baseline(host=experiment.host, profile=experiment.profile, config=experiment.baseline, user=owner)
    assert "is the pinned baseline" in owner_client.get(f"/experiments/{experiment.pk}/").content.decode()
