"""The review pages: the flags queue and triage, a series page and pinning its baseline."""

from __future__ import annotations

import pytest

from experiments.models import AuditEvent, Flag, FlagComment, PinnedBaseline
from experiments.views import flags as flag_views

from .factories import make_history, make_host


def _flag() -> Flag:
    """A confirmed regression flag, on a host of its own (so that flags do not merge into one change)."""
    host = make_host()
    make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1], host=host)
    return Flag.objects.get(host=host)


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
    figure_url = f"/history/{flag.host_id}/{flag.config_hash}/{flag.profile_key}/figure.json"
    assert f'data-figure-url="{figure_url}"'.encode() in page.content
    figure = owner_client.get(figure_url).json()  # fetched by the page once the chart is in view
    assert [trace["name"] for trace in figure["data"]][:2] == ["c=1", "regression"]
    assert figure["data"][0]["customdata"][-1].startswith("/runs/")

    response = owner_client.post(
        f"/flags/{flag.pk}/", {"triage": "acknowledged", "assignee": member.pk, "comment": "GPU 3 throttles"}
    )
    assert response.status_code == 302
    flag.refresh_from_db()
    assert (flag.triage, flag.assignee) == ("acknowledged", member)
    comment = FlagComment.objects.get()
    assert comment.author == owner and "GPU 3 throttles" in comment.text and "untriaged -> acknowledged" in comment.text
    # Comments are Markdown, through the notes' sanitiser: formatting shown, markup a comment carries never run.
    owner_client.post(
        f"/flags/{flag.pk}/", {"triage": "acknowledged", "comment": "**fixed** in `r42` <script>x()</script>"}
    )
    page = owner_client.get(f"/flags/{flag.pk}/").content.decode()
    assert "<strong>fixed</strong>" in page and "<code>r42</code>" in page and "<script>x()" not in page

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


def test_the_history_page_shows_each_suspicion_its_confirming_run_and_its_result(owner_client):
    from experiments.models import Suspicion

    from .factories import make_config

    config = make_config(name="<b>base</b>")
    runs = make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3], config=config)
    suspicion = Suspicion.objects.get()
    confirming = suspicion.confirming_runs.get()
    run = runs[0]

    page = owner_client.get(f"/history/{run.host_id}/{config.content_hash}/{run.experiment.profile.series_key}/")

    text = page.content.decode()
    section = text.split('id="suspicions"')[1].split("</section>")[0]
    assert f"run {runs[9].pk}" in section and f"run {confirming.pk}" in section
    assert "confirmed" in section and f"flag {suspicion.flag_id}" in section
    assert "88.8 → 82.2 tok/s" in section
    assert "<b>base</b>" not in text and "&lt;b&gt;base&lt;/b&gt;" in text
    figure = owner_client.get(
        f"/history/{run.host_id}/{config.content_hash}/{run.experiment.profile.series_key}/figure.json"
    )
    marked = [trace for trace in figure.json()["data"] if trace["name"] == "suspected"]
    assert marked and marked[0]["customdata"] == [f"/runs/{runs[9].pk}/"]  # where the suspected level starts


def test_a_flag_page_shows_the_series_inside_and_the_evidence(owner_client):
    runs = make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3])
    flag = Flag.objects.get()

    text = owner_client.get(f"/flags/{flag.pk}/").content.decode()

    evidence = text.split('id="evidence"')[1].split("</section>")[0]
    assert "1 series moved" in evidence
    assert f"run {runs[8].pk}" in evidence and f"run {runs[9].pk}" in evidence  # last before, first after
    assert f'confirmed by <a href="/runs/{runs[10].pk}/">run {runs[10].pk}</a>' in evidence
    assert "<td>88.8</td><td>82.3</td>" in evidence  # before; after = the suspected and confirming values


def test_the_queue_lists_one_flag_for_a_change_seen_at_every_concurrency(owner_client, django_assert_max_num_queries):
    make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3], concurrencies=(1, 4, 8))
    flag = Flag.objects.get()

    with django_assert_max_num_queries(12):
        listing = owner_client.get("/flags/")

    assert [f.pk for f in listing.context["flags"]] == [flag.pk]
    assert "and 2 more series" in listing.content.decode()
    assert "and 2 more series" in owner_client.get(f"/flags/{flag.pk}/").content.decode()


@pytest.mark.django_db
def test_a_member_triages_the_ticked_flags_at_once_each_with_its_own_thread(client, member):
    flags = [_flag() for _ in range(3)]
    client.force_login(member)

    response = client.post(
        "/flags/?state=open",
        {"flags": [flags[0].pk, flags[1].pk], "triage": "invalid", "assign_to_me": "on", "comment": "noise"},
    )

    assert response.status_code == 302
    for flag in flags:
        flag.refresh_from_db()
    assert [f.triage for f in flags] == ["invalid", "invalid", "untriaged"]
    assert flags[0].assignee == member and flags[2].assignee is None
    assert "noise" in flags[1].flagcomment_set.get().text
    assert AuditEvent.objects.filter(action=AuditEvent.Action.TRIAGE).count() == 2


@pytest.mark.django_db
def test_a_row_saves_its_own_triage_only(client, member):
    first, second = _flag(), _flag()
    client.force_login(member)

    response = client.post(
        "/flags/", {"row": str(second.pk), f"triage-{first.pk}": "fixed", f"triage-{second.pk}": "acknowledged"}
    )

    assert response.status_code == 302
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.triage, second.triage) == ("untriaged", "acknowledged")


@pytest.mark.django_db
def test_bulk_triage_needs_a_member_and_a_ticked_flag(client, viewer, member):
    flag = _flag()
    client.force_login(viewer)
    assert client.post("/flags/", {"flags": [flag.pk], "triage": "fixed"}).status_code == 403
    assert 'name="flags"' not in client.get("/flags/").content.decode()  # a viewer gets no triage controls

    client.force_login(member)
    refused = client.post("/flags/", {"triage": "fixed"})
    assert refused.status_code == 400 and "Tick a flag." in refused.content.decode()
    flag.refresh_from_db()
    assert flag.triage == "untriaged"


def test_the_queue_shows_its_flags_a_page_at_a_time(monkeypatch, owner_client, django_assert_max_num_queries):
    monkeypatch.setattr(flag_views, "FLAGS_PAGE", 2)
    for _ in range(3):
        _flag()
    newest_first = list(Flag.objects.order_by("-created_at", "-id"))

    with django_assert_max_num_queries(12):
        first = owner_client.get("/flags/?state=open")
    second = owner_client.get("/flags/?state=open&page=2")

    assert [f.pk for f in first.context["flags"]] == [f.pk for f in newest_first[:2]]
    assert [f.pk for f in second.context["flags"]] == [newest_first[2].pk]
    assert "page 1 of 2 · 3 flags" in first.content.decode()
    assert 'href="?state=open&amp;page=2" rel="next"' in first.content.decode()
    assert [f.pk for f in owner_client.get("/flags/?page=99").context["flags"]] == [newest_first[2].pk]
