"""Admins set the quotas: a member's on the Team page (or the admin site), a host's on its edit page; each change is
in the audit log with its old and new value, the refusal names who set the limit, and a raised limit lets the same
request through. Members cannot set their own."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, AuditEvent, Experiment, Host, MemberQuota, Run

from .factories import make_host, small_submission

pytestmark = pytest.mark.django_db


def _submit(client, host, launches: int, user, name: str = "big"):
    _, token = ApiToken.issue(user)
    return client.post("/api/experiments", small_submission(host, launches, name), content_type="application/json",
                       headers={"Authorization": f"Bearer {token}"})  # fmt: skip


def _host_form(host: Host, **changes) -> dict:
    form = {field: getattr(host, field) for field in Host.ADMIN_FIELDS}
    form.update(changes)
    return {name: "" if value is None else value for name, value in form.items()}


def test_an_admin_sets_a_members_quota_on_the_team_page_and_a_raised_one_lets_the_request_through(
    client, owner, member
):
    host = make_host()
    client.force_login(owner)
    client.post(f"/team/{member.pk}/quota/", {"launches_queued": "2", "gpu_hours_per_day": ""})

    refused = _submit(client, host, 3, member)

    assert refused.status_code == 429
    message = refused.json()["errors"]["quota"][0]
    assert message.startswith(
        "2 pending runs allowed for you (set by an admin); this asks 3 launches of 1 config, 3 runs (0 pending)."
    )
    assert message.endswith("An admin can raise your limit on /team/.")
    assert not Run.objects.exists()

    client.force_login(owner)
    page = client.post(f"/team/{member.pk}/quota/", {"launches_queued": "", "gpu_hours_per_day": "500"}, follow=True)

    assert "Quota of member saved." in page.content.decode()
    assert _submit(client, host, 3, member).status_code == 201  # launches back to the default (200)
    events = AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA).order_by("at", "id")
    assert [(e.actor_name, e.target_type, e.target_id, e.detail) for e in events] == [
        ("owner", "user", member.pk, {"changes": {"launches_queued": [None, 2]}}),
        ("owner", "user", member.pk, {"changes": {"launches_queued": [2, None], "gpu_hours_per_day": [None, 500.0]}}),
    ]


def test_an_admin_sets_a_hosts_quotas_on_its_edit_page_and_the_audit_keeps_old_and_new(client, owner, member):
    host = make_host()
    client.force_login(owner)
    response = client.post(f"/hosts/{host.pk}/edit/", _host_form(host, quota_gpu_hours_per_day="20"))
    assert response.status_code == 302, response.content.decode()

    refused = _submit(client, host, 2, member)  # 24.3 GPU-hours

    assert refused.status_code == 429
    message = refused.json()["errors"]["quota"][0]
    assert message.startswith(f"20.0 GPU-hours a day allowed on host {host.name} (set by an admin); this asks 24.3")
    assert "(0.0 used or reserved there in the last 24 h)" in message
    assert message.endswith(f"An admin can raise the host's limit on /hosts/{host.pk}/edit/.")
    assert not Experiment.objects.exists()

    client.force_login(owner)
    host.refresh_from_db()
    client.post(f"/hosts/{host.pk}/edit/", _host_form(host, quota_gpu_hours_per_day="30", quota_launches_queued="5"))

    assert _submit(client, host, 2, member).status_code == 201
    edits = AuditEvent.objects.filter(action=AuditEvent.Action.HOST_EDIT, target_id=host.pk).order_by("at", "id")
    assert [e.detail["changes"] for e in edits] == [
        {"quota_gpu_hours_per_day": [None, 20.0]},
        {"quota_gpu_hours_per_day": [20.0, 30.0], "quota_launches_queued": [None, 5]},
    ]
    detail = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "at most 5" in detail and "at most 30" in detail


def test_a_hosts_quotas_are_in_its_json_and_registered_through_the_api(client, owner, settings):
    settings.SPECDASH_HOST_ALLOWLIST = ("10.0.0.0/8",)
    _, token = ApiToken.issue(owner)
    body = {"name": "gpu-9", "address": "10.0.0.9", "port": 22, "username": "infer", "work_dir": "specdash-work",
            "launcher": "python3 -m sglang.launch_server", "python": "python3", "server_port": 30000,
            "quota_gpu_hours_per_day": 96}  # fmt: skip

    created = client.post("/api/hosts", body, content_type="application/json",
                          headers={"Authorization": f"Bearer {token}"})  # fmt: skip

    assert created.status_code == 201, created.content
    json = created.json()
    assert json["quota_gpu_hours_per_day"] == 96.0 and json["quota_launches_queued"] is None
    assert json["gpu_hours_quota"] == 96.0 and json["launch_quota"] == settings.SPECDASH_QUOTA_LAUNCHES_PER_HOST
    assert json["name"] == "gpu-9" and "cost_per_gpu_hour" in json  # nothing dropped


def test_it_refuses_a_negative_or_unbounded_quota(client, owner, member):
    host = make_host()
    client.force_login(owner)

    client.post(f"/team/{member.pk}/quota/", {"launches_queued": "-1", "gpu_hours_per_day": "1e12"})
    page = client.post(f"/hosts/{host.pk}/edit/", _host_form(host, quota_gpu_hours_per_day="-5"))

    assert not MemberQuota.objects.filter(launches_queued__isnull=False).exists()
    assert page.status_code == 400 and "greater than or equal to 0" in page.content.decode()
    assert not AuditEvent.objects.filter(action__in=[AuditEvent.Action.QUOTA, AuditEvent.Action.HOST_EDIT]).exists()


def test_a_member_cannot_set_their_own_quota_or_a_hosts(client, member):
    host = make_host()
    client.force_login(member)

    own = client.post(f"/team/{member.pk}/quota/", {"launches_queued": "100000", "gpu_hours_per_day": ""})
    on_host = client.post(f"/hosts/{host.pk}/edit/", _host_form(host, quota_launches_queued="100000"))
    admin_site = client.post("/admin/experiments/memberquota/add/", {"user": member.pk, "launches_queued": 100000})

    assert own.status_code == 403 and on_host.status_code == 403
    assert admin_site.status_code == 302 and admin_site["Location"].startswith("/admin/login/")
    assert not MemberQuota.objects.exists() and Host.objects.get().quota_launches_queued is None
    assert not AuditEvent.objects.filter(action__in=[AuditEvent.Action.QUOTA, AuditEvent.Action.HOST_EDIT]).exists()


def test_an_admin_sets_a_members_quota_in_the_admin_site_and_it_is_audited(client, owner, member):
    client.force_login(owner)

    added = client.post("/admin/experiments/memberquota/add/", {"user": member.pk, "gpu_hours_per_day": "48"})
    quota = MemberQuota.objects.get(user=member)
    change = f"/admin/experiments/memberquota/{quota.pk}/change/"
    changed = client.post(change, {"launches_queued": "7", "gpu_hours_per_day": "48"})

    assert added.status_code == 302 and changed.status_code == 302, changed.content.decode()[:2000]
    quota.refresh_from_db()
    assert (quota.launches_queued, quota.gpu_hours_per_day) == (7, 48.0)
    events = AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA).order_by("at", "id")
    assert [e.detail["changes"] for e in events] == [
        {"gpu_hours_per_day": [None, 48.0]},
        {"launches_queued": [None, 7]},
    ]


def test_the_team_page_shows_each_members_quota_to_admins(client, owner, member, settings):
    settings.SPECDASH_QUOTA_LAUNCHES_PER_USER = 200
    MemberQuota.objects.create(user=member, gpu_hours_per_day=12.5)
    client.force_login(owner)

    page = client.get("/team/").content.decode()

    assert f'action="/team/{member.pk}/quota/"' in page
    assert 'name="gpu_hours_per_day" min="0" step="any" value="12.5"' in page
    assert 'placeholder="200"' in page
