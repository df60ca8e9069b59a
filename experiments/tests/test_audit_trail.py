"""What the audit log records of configs and profiles made by hand, and of logins: as a member or a stranger
would send them (the login form, the API, the new-experiment form)."""

from __future__ import annotations

import pytest
from django.test import Client

from experiments.models import ApiToken, AuditEvent, BenchmarkProfile, ServerConfig

from .factories import MODELS, make_host
from .test_views_experiments import _browser_post, _eagle_fields

pytestmark = pytest.mark.django_db

PASSWORD = "right-pass-7"


def _bearer(user) -> dict[str, str]:
    _, token = ApiToken.issue(user)
    return {"Authorization": f"Bearer {token}"}


def _log_in(password: str, username: str = "alice", address: str = "10.1.1.1"):
    return Client().post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_it_records_a_config_and_a_profile_a_member_creates_through_the_api(client, member):
    headers = _bearer(member)
    config = {"name": "by-api", "model_path": f"{MODELS}/kimi-k2.5-sim", "tp_size": 8}

    made = client.post("/api/configs", config, content_type="application/json", headers=headers)
    profile = client.post(
        "/api/profiles", {"name": "short", "concurrency": [1]}, content_type="application/json", headers=headers
    )

    assert made.status_code == profile.status_code == 201
    (created,) = AuditEvent.objects.filter(action=AuditEvent.Action.CONFIG_CREATE)
    assert (created.actor, created.via, created.target_id) == (member, "api", made.json()["id"])
    assert created.token is not None and created.detail["content_hash"] == made.json()["content_hash"]
    (profiled,) = AuditEvent.objects.filter(action=AuditEvent.Action.PROFILE_CREATE)
    assert (profiled.actor, profiled.via, profiled.target_id) == (member, "api", profile.json()["id"])


def test_it_records_the_configs_and_the_profile_a_member_submits_from_the_form(client, member):
    host = make_host()
    client.force_login(member)

    response = client.post("/experiments/new/", _browser_post(host, _eagle_fields("cand-0", "eagle3-2step"), 1))

    assert response.status_code == 302
    configs = AuditEvent.objects.filter(action=AuditEvent.Action.CONFIG_CREATE, actor=member, via="web")
    assert {e.target_id for e in configs} == set(ServerConfig.objects.values_list("pk", flat=True))
    assert configs.count() == 2  # the baseline and the candidate
    profile = BenchmarkProfile.objects.get()
    assert AuditEvent.objects.filter(action=AuditEvent.Action.PROFILE_CREATE, target_id=profile.pk).exists()


def test_it_records_a_login_and_a_failed_one_without_the_password(django_user_model):
    alice = django_user_model.objects.create_user("alice", password=PASSWORD)

    assert _log_in("wrong-secret-123").status_code == 200
    assert _log_in(PASSWORD).status_code == 302

    failed = AuditEvent.objects.get(action=AuditEvent.Action.LOGIN_FAILED)
    assert (failed.actor, failed.ip, failed.target_id, failed.detail) == (None, "10.1.1.1", None, {"username": "alice"})
    logged_in = AuditEvent.objects.get(action=AuditEvent.Action.LOGIN)
    assert (logged_in.actor, logged_in.ip, logged_in.target_id) == (alice, "10.1.1.1", alice.pk)
    for event in AuditEvent.objects.all():
        assert "wrong-secret-123" not in repr(event.__dict__) and PASSWORD not in repr(event.__dict__)


@pytest.mark.parametrize("length", [150, 151, 256, 100_000])
def test_it_answers_an_overlong_username_with_the_form_and_records_at_most_150_characters(length):
    response = _log_in("x", username="a" * length)

    assert response.status_code == 200  # the login form again, never a 500
    names = [e.detail["username"] for e in AuditEvent.objects.all()]
    assert names == (["a" * 150] if length == 150 else [])  # longer was never a username: refused unread
    assert "Ensure this value has at most 150 characters" in response.content.decode() or length == 150


def test_it_records_a_lockout_and_each_attempt_refused_by_it(django_user_model, settings):
    django_user_model.objects.create_user("alice", password=PASSWORD)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _log_in("wrong")

    assert _log_in(PASSWORD).status_code == 429  # the right password, while locked out

    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    failures = settings.AXES_FAILURE_LIMIT - 1
    assert actions == [AuditEvent.Action.LOGIN_FAILED] * failures + [AuditEvent.Action.LOCKOUT] * 2
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.LOGIN).exists()


def test_the_audit_log_pages_keeping_its_action_filter(client, owner, monkeypatch):
    monkeypatch.setattr("experiments.views.team.AUDIT_PAGE", 2)
    AuditEvent.objects.bulk_create(
        AuditEvent(action=AuditEvent.Action.HOST_TEST, target_type="host", target_label=f"h{i}") for i in range(3)
    )
    AuditEvent.objects.create(action=AuditEvent.Action.KEY_CREATE, target_type="key", target_label="k")
    client.force_login(owner)

    first = client.get("/audit/", {"action": "host.test"}).content.decode()
    second = client.get("/audit/", {"action": "host.test", "page": "2"}).content.decode()
    unknown = client.get("/audit/", {"action": "<script>", "page": "2"}).content.decode()

    assert "page 1 of 2 · 3 events" in first and 'href="?action=host.test&amp;page=2" rel="next"' in first
    assert "page 2 of 2 · 3 events" in second and 'href="?action=host.test&amp;page=1" rel="prev"' in second
    # An action that is not one filters nothing and is not carried into the links.
    every = AuditEvent.objects.count()  # with the login's own events
    assert f"page 2 of {(every + 1) // 2} · {every} events" in unknown and 'href="?page=1" rel="prev"' in unknown
