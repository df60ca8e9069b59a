"""Every page: login required, and each renders for a logged-in user; the families have their own files."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Experiment, Run

from .factories import row_counts

pytestmark = pytest.mark.django_db


def _pages(experiment: Experiment, run: Run) -> list[str]:
    return [
        "/",
        "/experiments/new/",
        f"/experiments/{experiment.pk}/",
        f"/experiments/{experiment.pk}/export.csv",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/log.txt",
        "/hosts/",
        "/hosts/new/",
        "/tokens/",
    ]


def test_it_sends_an_anonymous_visitor_to_the_login_page(client, experiment, run):
    for url in _pages(experiment, run):
        response = client.get(url)

        assert response.status_code == 302, url
        assert response["Location"] == f"/login/?next={url}"


def test_it_refuses_anonymous_writes(client, experiment, run):
    host = experiment.host
    host.is_dirty = True
    host.save(update_fields=["is_dirty"])
    before = row_counts()

    for url in [f"/runs/{run.pk}/cancel/", f"/hosts/{host.pk}/clean/", f"/hosts/{host.pk}/test/", "/hosts/new/",
                "/tokens/new/", "/experiments/new/"]:  # fmt: skip
        response = client.post(url, {"candidate_count": "1"})

        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/")
    run.refresh_from_db()
    host.refresh_from_db()
    assert run.state == Run.State.QUEUED and not run.cancel_requested
    assert host.is_dirty
    assert ApiToken.objects.count() == 0
    assert row_counts() == before


def test_it_renders_every_page_for_a_logged_in_user(owner_client, experiment, run):
    for url in _pages(experiment, run):
        assert owner_client.get(url).status_code == 200, url
