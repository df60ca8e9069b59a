"""Quotas on shared hosts: a member cannot queue more launches than the quota allows, by submitting or re-running;
the refusal says the limit and who can raise it, and nothing is saved. Admins are not held to it."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Experiment, Run

from .factories import make_host, small_submission

pytestmark = pytest.mark.django_db


def _headers(user) -> dict:
    _, token = ApiToken.issue(user)
    return {"Authorization": f"Bearer {token}"}


def test_a_member_cannot_queue_past_their_quota_by_submitting_or_rerunning(client, member, settings):
    settings.SPECDASH_QUOTA_LAUNCHES_PER_USER = 5
    host = make_host()
    headers = _headers(member)

    first = client.post("/api/experiments", small_submission(host, 4), content_type="application/json", headers=headers)
    over = client.post(
        "/api/experiments", small_submission(host, 2, "more"), content_type="application/json", headers=headers
    )
    rerun = client.post(
        f"/api/experiments/{first.json()['id']}/rerun",
        {"launches": 2},
        content_type="application/json",
        headers=headers,
    )

    assert first.status_code == 201
    assert over.status_code == 429 and rerun.status_code == 429
    message = over.json()["errors"]["quota"][0]
    assert message == (
        "5 pending runs allowed for you (the default, SPECDASH_QUOTA_LAUNCHES_PER_USER); this asks 2 launches of 1 "
        "config, 2 runs (4 pending). An admin can raise your limit on /team/."
    )
    assert over.json()["detail"] == "over quota"
    assert rerun.json()["errors"]["quota"][0].startswith("5 pending runs allowed for you (the default")
    assert not Experiment.objects.filter(name="more").exists() and Run.objects.count() == 4


def test_a_host_has_a_quota_of_its_own_and_an_admin_is_not_held_to_either(client, member, owner, settings):
    settings.SPECDASH_QUOTA_LAUNCHES_PER_HOST = 3
    host = make_host()

    admin = client.post(
        "/api/experiments", small_submission(host, 5), content_type="application/json", headers=_headers(owner)
    )
    refused = client.post("/api/experiments", small_submission(host, 1, "one"), content_type="application/json",
                          headers=_headers(member))  # fmt: skip

    assert admin.status_code == 201
    assert refused.status_code == 429
    assert refused.json()["errors"]["quota"] == [
        f"3 pending runs allowed on host {host.name} (the default, SPECDASH_QUOTA_LAUNCHES_PER_HOST); this asks "
        f"1 launch of 1 config, 1 run (5 pending there). An admin can raise the host's limit on /hosts/{host.pk}/edit/."
    ]


def test_the_page_shows_the_quota_as_the_launches_fields_error(client, member, settings):
    settings.SPECDASH_QUOTA_LAUNCHES_PER_USER = 1
    host = make_host()
    client.force_login(member)
    client.post(
        "/api/experiments", small_submission(host, 1), content_type="application/json", headers=_headers(member)
    )
    experiment = Experiment.objects.get()

    response = client.post(f"/experiments/{experiment.pk}/rerun/", {"launches": 1}, follow=True)

    assert "1 pending run allowed for you" in response.content.decode()
    assert Run.objects.count() == 1
