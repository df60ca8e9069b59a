"""Who may do what, for every page, every API endpoint and both websockets: one user per role (viewer, member,
maintainer, admin) plus an outsider in no role, each allowed exactly what roles.py grants and refused the rest."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model

from dashboard.asgi import application
from experiments import roles
from experiments.models import ApiToken, AuditEvent, Experiment, Flag, Host, Run, SshKey

from .factories import make_experiment, make_history, make_host, make_ssh_key

RANK = {None: 0, roles.VIEWER: 1, roles.MEMBER: 2, roles.MAINTAINER: 3, roles.ADMIN: 4}
USERS = ["outsider", "viewer", "member", "maintainer", "owner"]  # the owner fixture is the team's admin
ROLE_OF = {"outsider": None, "viewer": "viewer", "member": "member", "maintainer": "maintainer", "owner": "admin"}


@dataclass
class World:
    mine: Experiment  # submitted by the member
    theirs: Experiment  # submitted by someone else
    my_run: Run
    their_run: Run
    flag: Flag
    host: Host
    key: SshKey
    series: str


@pytest.fixture
def world(db, member, django_user_model) -> World:
    someone = django_user_model.objects.create_user("someone")
    mine = make_experiment(created_by=member)
    theirs = make_experiment(created_by=someone, host=mine.host)
    history = make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])
    flag = Flag.objects.get()
    run = history[-1]
    series = f"/history/{run.host_id}/{run.config.content_hash}/{run.experiment.profile.series_key}/"
    host = make_host(is_dirty=True, dirty_reason="held")
    key = make_ssh_key(name="lab-key")
    return World(
        mine,
        theirs,
        mine.run_set.all()[0],
        theirs.run_set.all()[0],
        flag,
        host,
        key,
        series,  # type: ignore[arg-type]
    )


def _pages(w: World) -> list[tuple[str, str | None]]:
    """(GET address, the lowest role that reads it)."""
    return [
        ("/", roles.VIEWER),
        ("/experiments/new/", roles.MEMBER),
        (f"/experiments/{w.mine.pk}/", roles.VIEWER),
        (f"/experiments/{w.mine.pk}/export.csv", roles.VIEWER),
        (f"/experiments/{w.mine.pk}/export.json", roles.VIEWER),
        (f"/runs/{w.my_run.pk}/", roles.VIEWER),
        (f"/runs/{w.my_run.pk}/log.txt", roles.VIEWER),
        ("/hosts/", roles.VIEWER),
        (f"/hosts/{w.host.pk}/", roles.VIEWER),
        ("/hosts/new/", roles.ADMIN),
        (f"/hosts/{w.host.pk}/edit/", roles.ADMIN),
        ("/keys/", roles.ADMIN),
        (f"/keys/{w.key.pk}/", roles.ADMIN),
        ("/flags/", roles.VIEWER),
        ("/flags/export.csv", roles.VIEWER),
        (f"/flags/{w.flag.pk}/", roles.VIEWER),
        (w.series, roles.VIEWER),
        (f"{w.series}figure.json", roles.VIEWER),
        ("/tokens/", roles.VIEWER),
        ("/team/", roles.ADMIN),
        ("/audit/", roles.ADMIN),
        ("/configs/", roles.VIEWER),
        ("/notifications/", roles.VIEWER),
    ]


def _posts(w: World) -> list[tuple[str, dict, str | None]]:
    """(POST address, form data, the lowest role allowed). Data that would start SSH work is left invalid: the
    check under test is the role, which comes before validation."""
    return [
        ("/experiments/new/", {}, roles.MEMBER),
        (f"/experiments/{w.mine.pk}/rerun/", {"launches": "1"}, roles.MEMBER),
        (f"/experiments/{w.theirs.pk}/rerun/", {"launches": "1"}, roles.MAINTAINER),
        (f"/runs/{w.my_run.pk}/cancel/", {}, roles.MEMBER),
        (f"/runs/{w.their_run.pk}/cancel/", {}, roles.MAINTAINER),
        (f"/flags/{w.flag.pk}/", {"triage": "acknowledged", "comment": "seen"}, roles.MEMBER),
        (f"{w.series}pin/", {}, roles.MAINTAINER),
        (f"/hosts/{w.host.pk}/clean/", {}, roles.MAINTAINER),
        ("/hosts/new/", {"name": ""}, roles.ADMIN),
        (f"/hosts/{w.host.pk}/edit/", {"name": ""}, roles.ADMIN),
        ("/keys/new/", {"name": ""}, roles.ADMIN),
        (f"/keys/{w.key.pk}/", {"name": ""}, roles.ADMIN),
        (f"/keys/{w.key.pk}/delete/", {}, roles.ADMIN),
        ("/tokens/new/", {"name": "ci"}, roles.VIEWER),
        (f"/team/{w.mine.created_by_id}/role/", {"role": "member"}, roles.ADMIN),
        (f"/team/{w.mine.created_by_id}/quota/", {"launches_queued": "1"}, roles.ADMIN),
        (f"/team/{w.mine.created_by_id}/password-link/", {}, roles.ADMIN),
        (f"/team/{w.mine.created_by_id}/deactivate/", {}, roles.ADMIN),
        (f"/team/{w.mine.created_by_id}/reactivate/", {}, roles.ADMIN),
        ("/team/new/", {"username": ""}, roles.ADMIN),
        ("/notifications/", {"channel": "browser", "events": ["flag_raised"]}, roles.VIEWER),
    ]


def _allowed(user: str, lowest: str | None) -> bool:
    return RANK[ROLE_OF[user]] >= RANK[lowest]


@pytest.mark.django_db
@pytest.mark.parametrize("username", USERS)
def test_it_shows_each_page_to_the_roles_that_read_it_and_refuses_the_others(client, world, username, request):
    client.force_login(request.getfixturevalue(username))
    for path, lowest in _pages(world):
        status = client.get(path).status_code
        if _allowed(username, lowest):
            assert status == 200, (username, path, status)
        else:
            assert status == 403, (username, path, status)


@pytest.mark.django_db
@pytest.mark.parametrize("username", USERS)
def test_it_lets_each_role_change_what_it_may_and_nothing_else(client, world, username, request):
    client.force_login(request.getfixturevalue(username))
    for path, data, lowest in _posts(world):
        status = client.post(path, data).status_code
        if _allowed(username, lowest):
            assert status in (200, 302, 400), (username, path, status)
        else:
            assert status == 403, (username, path, status)


@pytest.mark.django_db
def test_each_role_group_holds_exactly_its_permissions_after_the_migrations():
    from django.contrib.auth.models import Group

    for role, names in roles.PERMISSIONS.items():
        held = Group.objects.get(name=role).permissions.select_related("content_type")
        assert sorted(f"{p.content_type.app_label}.{p.codename}" for p in held) == sorted(names), role


@pytest.mark.django_db
def test_it_sends_anonymous_visitors_to_the_login_page(client, world):
    for path, _ in _pages(world):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), path
    for path, data, _ in _posts(world):
        response = client.post(path, data)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), path


def _api_calls(w: World) -> list[tuple[str, str, dict | None, str | None]]:
    """(method, address, JSON body, the lowest role allowed). As for pages, bodies stop short of SSH work."""
    return [
        ("get", "/api/hosts", None, roles.VIEWER),
        ("post", "/api/hosts", {"name": ""}, roles.ADMIN),
        ("post", f"/api/hosts/{w.host.pk}/clean", None, roles.MAINTAINER),
        ("get", "/api/configs", None, roles.VIEWER),
        ("post", "/api/configs", {"name": ""}, roles.MEMBER),
        ("get", "/api/profiles", None, roles.VIEWER),
        ("post", "/api/profiles", {"name": ""}, roles.MEMBER),
        ("post", "/api/experiments", {"name": "", "host": 0, "baseline": {}, "candidates": [], "profile": {}},
         roles.MEMBER),
        ("get", f"/api/experiments/{w.mine.pk}", None, roles.VIEWER),
        ("get", f"/api/experiments/{w.mine.pk}/export.csv", None, roles.VIEWER),
        ("post", f"/api/experiments/{w.mine.pk}/rerun", {"launches": 0}, roles.MEMBER),
        ("post", f"/api/experiments/{w.theirs.pk}/rerun", {"launches": 0}, roles.MAINTAINER),
        ("get", f"/api/runs/{w.my_run.pk}", None, roles.VIEWER),
        ("get", f"/api/runs/{w.my_run.pk}/log", None, roles.VIEWER),
        ("post", f"/api/runs/{w.my_run.pk}/cancel", None, roles.MEMBER),
        ("post", f"/api/runs/{w.their_run.pk}/cancel", None, roles.MAINTAINER),
    ]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("username", USERS)
def test_it_applies_the_same_roles_to_the_api(client, world, username, request):
    _, token = ApiToken.issue(request.getfixturevalue(username))
    headers = {"Authorization": f"Bearer {token}"}
    for method, path, body, lowest in _api_calls(world):
        call = getattr(client, method)
        response = (
            call(path, body, content_type="application/json", headers=headers)
            if body is not None
            else (call(path, headers=headers))
        )
        if _allowed(username, lowest):
            assert response.status_code in (200, 201, 422), (username, path, response.status_code)
        else:
            assert response.status_code == 403, (username, path, response.status_code)
            assert "detail" in response.json()


@pytest.mark.django_db
@pytest.mark.parametrize("username", ["outsider", "viewer", "member", "maintainer"])
def test_it_keeps_host_registration_and_connection_tests_to_admins(client, world, username, request):
    """The two calls that make a worker connect somewhere (run as admin in the integration tests)."""
    _, token = ApiToken.issue(request.getfixturevalue(username))
    headers = {"Authorization": f"Bearer {token}"}

    test = client.post(f"/api/hosts/{world.host.pk}/test", headers=headers)
    created = client.post(
        "/api/hosts",
        {"name": "evil", "address": "127.0.0.1", "username": "root", "shell_setup": "touch /tmp/pwned"},
        content_type="application/json",
        headers=headers,
    )

    assert test.status_code == created.status_code == 403
    assert not Host.objects.filter(name="evil").exists()


@pytest.mark.django_db
def test_it_refuses_the_api_to_anonymous_callers(client, world):
    for method, path, body, _ in _api_calls(world):
        call = getattr(client, method)
        response = call(path, body, content_type="application/json") if body is not None else call(path)
        assert response.status_code == 401, path


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("username", "accepted"), [("outsider", False), ("viewer", True), ("owner", True)])
async def test_it_streams_a_run_and_an_experiment_only_to_roles_that_read_them(client, username, accepted, request):
    from asgiref.sync import sync_to_async

    user = await sync_to_async(request.getfixturevalue)(username)
    experiment = await sync_to_async(make_experiment)()
    run = await sync_to_async(lambda: experiment.run_set.all()[0])()
    await sync_to_async(client.force_login)(user)
    headers = [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()), (b"origin", b"http://127.0.0.1")]
    for path in (f"/ws/runs/{run.pk}/log/", f"/ws/experiments/{experiment.pk}/"):
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=5)
        if accepted:
            assert connected, (username, path)
        else:
            assert not connected and code == 4403, (username, path, code)
        await communicator.disconnect()


@pytest.mark.django_db
def test_it_records_who_did_what_from_where(client, world, member):
    _, token = ApiToken.issue(member, name="laptop")

    client.post(
        f"/api/runs/{world.my_run.pk}/cancel", headers={"Authorization": f"Bearer {token}"}, REMOTE_ADDR="10.1.2.3"
    )
    client.force_login(member)
    client.post(f"/experiments/{world.mine.pk}/rerun/", {"launches": "1"}, REMOTE_ADDR="10.1.2.4")

    # (The world's history also holds a confirming re-run, queued by the analysis: not a person's doing.)
    people = AuditEvent.objects.order_by("at", "id").exclude(via="analysis")
    cancel, rerun = people.filter(action__in=["run.cancel", "experiment.rerun"])
    assert (cancel.actor, cancel.via, cancel.ip, cancel.token_name) == (member, "api", "10.1.2.3", "laptop")
    assert (cancel.target_type, cancel.target_id) == ("run", world.my_run.pk)
    assert (rerun.actor, rerun.via, rerun.ip, rerun.detail["launches"]) == (member, "web", "10.1.2.4", 1)
    page = client.get(f"/experiments/{world.mine.pk}/").content.decode()
    assert "run.cancel" in page and "experiment.rerun" in page and "token “laptop”" in page


@pytest.mark.django_db
def test_it_lets_an_admin_change_roles_and_records_it(client, owner, viewer):
    client.force_login(owner)

    client.post(f"/team/{viewer.pk}/role/", {"role": "maintainer"})

    viewer = get_user_model().objects.get(pk=viewer.pk)
    assert roles.role_of(viewer) == roles.MAINTAINER
    event = AuditEvent.objects.get(action="user.roles", target_id=viewer.pk, actor=owner)
    assert (event.actor, event.detail) == (owner, {"before": "viewer", "after": "maintainer"})
    # Not the team's last admin role (tests/test_team.py: with another admin, either may step down).
    assert client.post(f"/team/{owner.pk}/role/", {"role": "viewer"}).status_code == 409
    assert roles.role_of(get_user_model().objects.get(pk=owner.pk)) == roles.ADMIN


@pytest.mark.django_db
def test_it_lets_only_the_owner_or_an_admin_revoke_a_token(client, viewer, member, owner):
    token, raw = ApiToken.issue(member)
    client.force_login(viewer)
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 403

    client.force_login(member)
    response = client.post(f"/tokens/{token.pk}/revoke/", follow=True)

    assert "revoked" in response.content.decode()
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    client.logout()
    assert client.get("/api/hosts", headers={"Authorization": f"Bearer {raw}"}).status_code == 401
    assert AuditEvent.objects.filter(action="token.revoke", actor=member).exists()


@pytest.mark.django_db
def test_it_never_caches_the_token_page(client, viewer):
    client.force_login(viewer)

    listed = client.get("/tokens/")
    created = client.post("/tokens/new/", {"name": "ci"})

    for response in (listed, created):
        assert "no-store" in response["Cache-Control"]


@pytest.mark.django_db
def test_it_only_follows_a_cancel_next_address_on_this_site(client, owner, world):
    client.force_login(owner)
    run = world.my_run
    for target, expected in [
        ("https://evil.example/phish", run.get_absolute_url()),
        ("//evil.example/", run.get_absolute_url()),
        ("javascript:alert(1)", run.get_absolute_url()),
        ("\\\\evil.example", run.get_absolute_url()),
        (world.mine.get_absolute_url(), world.mine.get_absolute_url()),
    ]:
        Run.objects.filter(pk=run.pk).update(state=Run.State.QUEUED, cancel_requested=False)
        response = client.post(f"/runs/{run.pk}/cancel/", {"next": target})
        assert response.status_code == 302 and response["Location"] == expected, target


@pytest.mark.django_db
def test_it_records_a_role_change_made_in_the_admin_site_and_keeps_hosts_out_of_it(client, owner, viewer, world):
    client.force_login(owner)

    response = client.post(
        f"/admin/auth/user/{viewer.pk}/change/",
        {"username": "viewer", "is_active": "on", "groups": [roles.group_of(roles.MEMBER).pk],
         "date_joined_0": "2026-11-30", "date_joined_1": "10:00:00"},
    )  # fmt: skip

    assert response.status_code == 302, response.content.decode()[:2000]
    event = AuditEvent.objects.get(action="user.roles", target_id=viewer.pk, actor=owner)
    assert event.detail == {"before": "viewer", "after": "member"}
    # Hosts are edited only where the edit is validated and audited.
    assert client.post(f"/admin/experiments/host/{world.host.pk}/change/", {"name": "x"}).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_a_flushed_database_gets_its_role_groups_and_builtin_prompt_sets_back():
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    from experiments.models import PromptSet

    call_command("flush", interactive=False, verbosity=0)

    assert set(Group.objects.values_list("name", flat=True)) == set(roles.ORDER)
    member = Group.objects.get(name=roles.MEMBER)
    assert {f"{p.content_type.app_label}.{p.codename}" for p in member.permissions.all()} == set(
        roles.PERMISSIONS[roles.MEMBER]
    )
    assert PromptSet.objects.filter(kind="random").exists()
