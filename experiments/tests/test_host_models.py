"""A host's model listing: reading it (any role) answers from the stored list, never writes and never reaches a
worker or the host; listing again is a member's explicit POST, sent to a worker without waiting for it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from experiments.actions import dispatch
from experiments.models import ApiToken, AuditEvent, Host

from .factories import MODELS, make_host

pytestmark = pytest.mark.django_db

LISTED_AGE = timedelta(hours=3)  # from the test's own now: a module-level now is minutes old in a long run
LISTED = [{"name": "kimi-k2.5-sim", "path": f"{MODELS}/kimi-k2.5-sim", "max_position_embeddings": 262144}]


def _listed_host(**fields) -> Host:
    return make_host(
        models_root=MODELS,
        model_inventory={"models_root": MODELS, "models": LISTED},
        model_inventory_at=timezone.now() - LISTED_AGE,
        **fields,
    )


def _listed_at(host: Host) -> str:
    assert host.model_inventory_at is not None
    return host.model_inventory_at.isoformat()


def _bearer(user) -> dict[str, str]:
    _, token = ApiToken.issue(user)
    return {"Authorization": f"Bearer {token}"}


def test_a_viewers_listing_is_the_stored_one_and_writes_nothing_nor_sends_anything(client, viewer, sent):
    host = _listed_host()
    headers = _bearer(viewer)
    before = Host.objects.values().get(pk=host.pk)

    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/api/hosts/{host.pk}/models", headers=headers)

    assert response.status_code == 200
    assert response.json() == LISTED
    assert response["X-Models-Listed-At"] == _listed_at(host)
    writes = [q["sql"] for q in queries if q["sql"].split()[0] in ("INSERT", "UPDATE", "DELETE")]
    assert writes == [q["sql"] for q in queries if 'UPDATE "experiments_apitoken"' in q["sql"]]  # token last used
    assert sent == [] and Host.objects.values().get(pk=host.pk) == before
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.HOST_MODELS).exists()


def test_a_listing_of_another_models_root_is_not_shown_as_this_ones(client, viewer, sent):
    host = _listed_host()
    Host.objects.filter(pk=host.pk).update(models_root="/srv/other")

    response = client.get(f"/api/hosts/{host.pk}/models", headers=_bearer(viewer))

    assert response.status_code == 200 and response.json() == []
    assert "X-Models-Listed-At" not in response
    (listed,) = [h for h in client.get("/api/hosts", headers=_bearer(viewer)).json() if h["id"] == host.pk]
    assert listed["models_listed_at"] is None


def test_a_viewer_cannot_ask_for_a_new_listing(client, viewer, sent):
    host = _listed_host()

    api = client.post(f"/api/hosts/{host.pk}/models/refresh", headers=_bearer(viewer))
    client.force_login(viewer)
    page = client.post(f"/hosts/{host.pk}/models/refresh/")

    assert api.status_code == 403 and page.status_code == 403
    assert sent == [] and not AuditEvent.objects.filter(action=AuditEvent.Action.HOST_MODELS).exists()


def test_a_member_asks_for_a_new_listing_that_a_worker_makes_after_the_commit(
    client, member, sent, django_capture_on_commit_callbacks
):
    host = _listed_host()
    headers = _bearer(member)

    with django_capture_on_commit_callbacks(execute=True):
        first = client.post(f"/api/hosts/{host.pk}/models/refresh", headers=headers)
    with django_capture_on_commit_callbacks(execute=True):
        again = client.post(f"/api/hosts/{host.pk}/models/refresh", headers=headers)

    assert first.status_code == again.status_code == 202
    assert first.json() == {"id": host.pk, "requested": True, "models_listed_at": _listed_at(host)}
    assert again.json()["requested"] is False  # one SSH listing per cool-down, however often it is asked
    assert sent == [(dispatch.LIST_HOST_MODELS_TASK, [host.pk])]
    event = AuditEvent.objects.get(action=AuditEvent.Action.HOST_MODELS)
    assert (event.actor, event.target_id, event.via) == (member, host.pk, "api")


def test_the_host_page_shows_the_stored_list_with_its_age_and_a_members_button(
    client, viewer, member, sent, django_capture_on_commit_callbacks
):
    host = _listed_host()
    client.force_login(viewer)

    page = client.get(f"/hosts/{host.pk}/").content.decode()

    assert f"{MODELS}/kimi-k2.5-sim" in page and "as listed" in page and "3\xa0hours ago" in page
    assert f"/hosts/{host.pk}/models/refresh/" not in page  # no button for a viewer
    client.force_login(member)
    assert f"/hosts/{host.pk}/models/refresh/" in client.get(f"/hosts/{host.pk}/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/hosts/{host.pk}/models/refresh/")
    assert response.status_code == 302 and response["Location"] == f"/hosts/{host.pk}/"
    assert sent == [(dispatch.LIST_HOST_MODELS_TASK, [host.pk])]
    assert client.get(f"/hosts/{host.pk}/models/refresh/").status_code == 405  # a GET never lists
