"""The review pages: the flags queue and triage, a series page and pinning its baseline."""

from __future__ import annotations

import pytest

from experiments.models import Flag, FlagComment, PinnedBaseline

from .factories import make_history

pytestmark = pytest.mark.django_db


def test_it_lists_open_flags_and_triages_one_with_a_comment(owner_client, owner, member):
    make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])
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
    make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])
    flag = Flag.objects.get()

    response = owner_client.post(f"/flags/{flag.pk}/", {"triage": "wontfix"})

    assert response.status_code == 200
    assert b"Select a valid choice" in response.content
    flag.refresh_from_db()
    assert flag.triage == "untriaged"


def test_it_shows_a_series_and_pins_it_as_the_baseline(owner_client, owner):
    runs = make_history([88.8, 88.9, 88.7])
    run = runs[0]
    url = f"/history/{run.host_id}/{run.config.content_hash}/{run.experiment.profile.series_key}/"

    assert owner_client.get(url).status_code == 200
    response = owner_client.post(url + "pin/")

    assert response.status_code == 302
    pinned = PinnedBaseline.objects.get()
    assert (pinned.host_id, pinned.config.content_hash) == (run.host_id, run.config.content_hash)
    assert b"pinned baseline" in owner_client.get(url).content


def test_it_requires_login_for_the_review_pages(client):
    runs = make_history([88.8, 88.9])
    run = runs[0]
    for url in ["/flags/", f"/history/{run.host_id}/{run.config.content_hash}/{run.experiment.profile.series_key}/"]:
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
