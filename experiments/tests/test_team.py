"""Admins run the team from the Team page, without the admin site: they add a teammate, who sets a password through
a set-password link (shown to the admin once, e-mailed where this server sends e-mail) and logs in; they deactivate
and reactivate teammates and set their roles and quotas. Each change is in the audit log, only admins may make it,
and the team always keeps an active admin."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from experiments import roles
from experiments.actions.audit import Actor
from experiments.actions.users import TeamRefused, do_add_teammate, do_set_role
from experiments.models import ApiToken, AuditEvent, MemberQuota

pytestmark = pytest.mark.django_db

User = get_user_model()
STRONG = "Tr0ub4dor&3-horse"
TEAM_CHANGES = ["user.add", "user.deactivate", "user.reactivate", "user.password_link", "user.roles", "user.quota"]
LINK = re.compile(r'<code class="hash" id="password-link">(http://testserver(/password/[^/]+/[^/]+/))</code>')


def _link(response) -> str:
    """The set-password path the page shows the admin (its absolute address is on this server)."""
    found = LINK.search(response.content.decode())
    assert found, response.content.decode()
    return found.group(2)


def _events(action: str) -> list[tuple]:
    """What people did on the pages (the fixtures' users got their roles by command)."""
    return [
        (e.actor_name, e.target_type, e.target_label, e.detail)
        for e in AuditEvent.objects.filter(action=action, via="web").order_by("at", "id")
    ]


def _text(response) -> str:
    return response.content.decode().replace("&#x27;", "'")


def test_it_adds_a_teammate_who_sets_a_password_through_the_link_and_logs_in(client, owner, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"  # e-mail not configured
    client.force_login(owner)

    added = client.post("/team/new/", {"username": "alice", "email": "", "role": "member"})

    assert added.status_code == 201
    page = added.content.decode()
    assert "alice joins as member." in page and "It works once, for 3 days" in page
    assert "No e-mail was sent: alice has no e-mail address." in page
    assert added["Cache-Control"].startswith("max-age=0") and "no-store" in added["Cache-Control"]
    alice = User.objects.get(username="alice")
    assert alice.is_active and not alice.has_usable_password() and roles.role_of(alice) == roles.MEMBER
    assert _events("user.add") == [("owner", "user", "alice", {"role": "member", "email": "", "emailed": False})]

    teammate = Client()
    opened = teammate.get(_link(added))
    assert opened.status_code == 302 and opened["Location"].endswith("/set-password/")  # the token leaves the URL
    form = teammate.get(opened["Location"])
    assert "Set your password" in form.content.decode() and "For <strong>alice</strong>" in form.content.decode()

    weak = teammate.post(opened["Location"], {"new_password1": "12345678901", "new_password2": "12345678901"})
    assert weak.status_code == 200 and "This password is entirely numeric." in weak.content.decode()
    assert not User.objects.get(username="alice").has_usable_password()

    done = teammate.post(opened["Location"], {"new_password1": STRONG, "new_password2": STRONG}, follow=True)

    assert done.redirect_chain == [("/login/", 302)]
    assert "Your password is set, alice: log in with it." in done.content.decode()
    logged_in = teammate.post("/login/", {"username": "alice", "password": STRONG})
    assert logged_in.status_code == 302 and logged_in["Location"] == "/"
    assert teammate.get("/experiments/new/").status_code == 200  # a member may submit
    assert [(e.actor_name, e.target_label) for e in AuditEvent.objects.filter(action="user.password_set")] == [
        ("alice", "alice")
    ]
    # The link worked once: it hashes the password it replaced.
    assert "This link does not work" in Client().get(_link(added), follow=True).content.decode()


def test_it_emails_the_link_where_email_is_configured(client, owner, settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.SPECDASH_BASE_URL = "https://specdash.example.org"
    client.force_login(owner)

    with django_capture_on_commit_callbacks(execute=True):
        added = client.post("/team/new/", {"username": "bob", "email": "bob@example.org", "role": "viewer"})

    assert "It is also e-mailed to bob@example.org." in added.content.decode()
    assert [(m.to, m.subject) for m in mail.outbox] == [
        (["bob@example.org"], "Your specdash account: set your password")
    ]
    emailed = re.search(r"https://specdash\.example\.org(/password/\S+/)", str(mail.outbox[0].body))
    assert emailed and "username bob" in mail.outbox[0].body
    # The e-mailed link is the teammate's own (made after the commit) and works as the one on the page does.
    assert Client().get(emailed.group(1))["Location"].endswith("/set-password/")
    assert _events("user.add")[0][3] == {"role": "viewer", "email": "bob@example.org", "emailed": True}


def test_it_sends_no_email_where_none_is_configured(client, owner, settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"  # would print the link into a log
    client.force_login(owner)

    with django_capture_on_commit_callbacks(execute=True):
        added = client.post("/team/new/", {"username": "carol", "email": "carol@example.org", "role": "member"})

    assert added.status_code == 201 and mail.outbox == []
    assert "No e-mail was sent: this server sends no e-mail (set EMAIL_HOST)." in added.content.decode()


@pytest.mark.parametrize(
    ("username", "why"),
    [
        ("Member", "The team has a member already; choose another username."),
        ("\u0430lice", "Enter a valid username."),  # a Cyrillic "a": a look-alike of "alice"
        ("al ice", "Enter a valid username."),
        ("x" * 151, "Ensure this value has at most 150 characters"),
    ],
)
def test_it_refuses_a_taken_or_unsafe_username_naming_the_field(client, owner, member, username, why):
    client.force_login(owner)

    refused = client.post("/team/new/", {"username": username, "email": "", "role": "member"})

    assert refused.status_code == 400
    page = _text(refused)
    field = re.search(r'<label class="field has-error" for="id_username">.*?</label>', page, re.S)
    assert field and why in field.group(0)
    assert User.objects.count() == 2 and not AuditEvent.objects.filter(action="user.add").exists()


def test_the_action_itself_refuses_a_name_taken_since_the_form_checked_it(owner):
    # The form checked first; another admin's request added the same name meanwhile (the action holds the lock).
    with pytest.raises(TeamRefused, match="The team has a OWNER already"):
        do_add_teammate("OWNER", "", roles.MEMBER, Actor(owner))
    assert User.objects.count() == 1


def test_it_refuses_a_bad_email_or_role(client, owner):
    client.force_login(owner)

    bad_email = client.post("/team/new/", {"username": "dave", "email": "not an address", "role": "member"})
    bad_role = client.post("/team/new/", {"username": "dave", "email": "", "role": "superuser"})

    assert bad_email.status_code == bad_role.status_code == 400
    assert "Enter a valid email address." in bad_email.content.decode()
    assert "Select a valid choice. superuser is not one of the available choices." in bad_role.content.decode()
    assert not User.objects.filter(username="dave").exists()


def test_it_deactivates_a_teammate_whose_session_token_and_links_stop_working(client, owner, member):
    _, raw = ApiToken.issue(member)
    theirs = Client()
    theirs.force_login(member)
    client.force_login(owner)
    link = _link(client.post(f"/team/{member.pk}/password-link/"))

    deactivated = client.post(f"/team/{member.pk}/deactivate/", follow=True)

    assert "member is deactivated: they cannot log in." in deactivated.content.decode()
    assert not User.objects.get(pk=member.pk).is_active
    assert theirs.get("/experiments/")["Location"].startswith("/login/")
    assert Client().get("/api/me", headers={"Authorization": f"Bearer {raw}"}).status_code == 401
    assert "This link does not work" in Client().get(link).content.decode()
    assert client.post(f"/team/{member.pk}/password-link/").status_code == 409  # reactivate first

    client.post(f"/team/{member.pk}/reactivate/")

    assert User.objects.get(pk=member.pk).is_active
    assert Client().get(link).status_code == 302  # their earlier link works again
    assert [e[:3] for e in _events("user.deactivate") + _events("user.reactivate")] == [
        ("owner", "user", "member"),
        ("owner", "user", "member"),
    ]
    assert [e[3] for e in _events("user.password_link")] == [{"emailed": False}]


def test_it_keeps_an_active_admin_on_the_team(client, owner, maintainer):
    client.force_login(owner)

    deactivate = client.post(f"/team/{owner.pk}/deactivate/")
    demote = client.post(f"/team/{owner.pk}/role/", {"role": "maintainer"})

    assert deactivate.status_code == demote.status_code == 409
    reason = "owner is the team's only active admin: make another teammate an admin first"
    assert reason in _text(deactivate) and reason in _text(demote)
    owner = User.objects.get(pk=owner.pk)
    assert owner.is_active and roles.role_of(owner) == roles.ADMIN
    with pytest.raises(CommandError, match="only active admin"):
        call_command("set_role", "owner", "viewer")
    assert not AuditEvent.objects.filter(action__in=TEAM_CHANGES, target_id=owner.pk, via="web").exists()

    # With a second admin, either may step down.
    client.post(f"/team/{maintainer.pk}/role/", {"role": "admin"})
    stepped_down = client.post(f"/team/{owner.pk}/role/", {"role": "maintainer"})

    assert stepped_down.status_code == 302
    assert roles.role_of(User.objects.get(pk=owner.pk)) == roles.MAINTAINER
    # The one admin left is then the last: no one deactivates them, and an inactive admin does not count.
    do_set_role(User.objects.get(pk=owner.pk), roles.ADMIN, Actor.command())
    client.post(f"/team/{owner.pk}/deactivate/")
    client.force_login(maintainer)
    assert client.post(f"/team/{maintainer.pk}/deactivate/").status_code == 409


def test_it_sets_a_role_and_quotas_from_the_team_page(client, owner, viewer):
    client.force_login(owner)

    client.post(f"/team/{viewer.pk}/role/", {"role": "member"})
    client.post(f"/team/{viewer.pk}/quota/", {"launches_queued": "3", "gpu_hours_per_day": "12"})
    unknown = client.post(f"/team/{viewer.pk}/role/", {"role": "root"})
    negative = client.post(f"/team/{viewer.pk}/quota/", {"launches_queued": "-1", "gpu_hours_per_day": ""})

    assert roles.role_of(User.objects.get(pk=viewer.pk)) == roles.MEMBER
    quota = MemberQuota.objects.get(user=viewer)
    assert (quota.launches_queued, quota.gpu_hours_per_day) == (3, 12.0)
    assert unknown.status_code == negative.status_code == 400
    assert "Role of viewer not set: Select a valid choice." in unknown.content.decode()
    assert "Quota of viewer not saved: Launches at once: Ensure this value is greater than or equal to 0." in (
        negative.content.decode()
    )
    assert [e[3] for e in _events("user.roles")] == [{"before": "viewer", "after": "member"}]
    assert [e[3] for e in _events("user.quota")] == [
        {"changes": {"launches_queued": [None, 3], "gpu_hours_per_day": [None, 12.0]}}
    ]


@pytest.mark.parametrize("username", ["viewer", "member", "maintainer"])
def test_only_an_admin_changes_the_team(client, owner, username, request):
    someone = request.getfixturevalue(username)
    client.force_login(someone)
    target = owner.pk
    posts = [
        ("/team/new/", {"username": "eve", "email": "", "role": "admin"}),
        (f"/team/{target}/deactivate/", {}),
        (f"/team/{target}/reactivate/", {}),
        (f"/team/{target}/password-link/", {}),
        (f"/team/{target}/role/", {"role": "viewer"}),
        (f"/team/{someone.pk}/role/", {"role": "admin"}),  # nor raise themselves
        (f"/team/{someone.pk}/quota/", {"launches_queued": "100000", "gpu_hours_per_day": ""}),
    ]

    statuses = [client.post(path, data).status_code for path, data in posts]

    assert statuses == [403] * len(posts)
    assert client.get("/team/").status_code == 403
    assert not User.objects.filter(username="eve").exists() and User.objects.get(pk=owner.pk).is_active
    assert roles.role_of(User.objects.get(pk=someone.pk)) == username
    assert not AuditEvent.objects.filter(action__in=TEAM_CHANGES, via="web").exists()


class _Boxes(HTMLParser):
    """Each form box of a page (input, select) with the text of the <label> around it, up to the box."""

    def __init__(self) -> None:
        super().__init__()
        self.labels: list[list[str]] = []
        self.boxes: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if tag == "label":
            self.labels.append([])
        elif tag in ("input", "select", "textarea") and attributes.get("type") not in ("hidden", "submit"):
            self.boxes.append((attributes.get("name") or "", " ".join("".join(t) for t in self.labels).strip()))

    def handle_endtag(self, tag: str) -> None:
        if tag == "label" and self.labels:
            self.labels.pop()

    def handle_data(self, data: str) -> None:
        for label in self.labels:
            label.append(data)


def test_every_box_of_the_team_page_has_a_visible_label(client, owner, member):
    client.force_login(owner)
    boxes = _Boxes()

    boxes.feed(client.get("/team/").content.decode())

    by_name: dict[str, set[str]] = {}
    for name, label in boxes.boxes:
        by_name.setdefault(name, set()).add(" ".join(label.split()))
    assert by_name == {
        "username": {"Username"},
        "email": {"E-mail (optional)"},
        "role": {"Role"},
        "launches_queued": {"Launches at once"},
        "gpu_hours_per_day": {"GPU-hours a day"},
    }
