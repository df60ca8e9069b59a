"""Weak passwords refused wherever a password is set: the admin site's new-user and password forms, and
`createsuperuser`, typed or from DJANGO_SUPERUSER_PASSWORD; the local demo's demo/demo still logs in."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from dashboard.demo.management.commands.demo import Command as Demo

pytestmark = pytest.mark.django_db

# Each refused, and why: too common, entirely numeric (and too common), too short, too like the username.
WEAK = {
    "password123": "This password is too common.",
    "qwerty123456": "This password is too common.",
    "93847561029384": "This password is entirely numeric.",
    "12345678901": "This password is entirely numeric.",
    "x7#kq": "This password is too short.",
    "newcomer-2026": "The password is too similar to the username.",
}
STRONG = "Tr0ub4dor&3-horse"


@pytest.mark.parametrize(("password", "why"), WEAK.items())
def test_the_admin_site_refuses_a_weak_password_for_a_new_user(owner_client, password, why):
    body = {"username": "newcomer", "password1": password, "password2": password, "usable_password": "true"}

    response = owner_client.post("/admin/auth/user/add/", body)

    assert response.status_code == 200  # the form again
    assert why in response.content.decode().replace("&#x27;", "'")
    assert not get_user_model().objects.filter(username="newcomer").exists()


def test_the_admin_site_takes_a_strong_password(owner_client):
    body = {"username": "newcomer", "password1": STRONG, "password2": STRONG, "usable_password": "true"}

    response = owner_client.post("/admin/auth/user/add/", body)

    assert response.status_code == 302
    assert get_user_model().objects.get(username="newcomer").check_password(STRONG)


def test_the_admin_site_refuses_a_weak_password_change(owner_client, member):
    body = {"password1": "password123", "password2": "password123", "usable_password": "true"}

    response = owner_client.post(f"/admin/auth/user/{member.pk}/password/", body)

    assert response.status_code == 200 and "This password is too common." in response.content.decode()
    member.refresh_from_db()
    assert member.check_password("member-pass")


@pytest.mark.parametrize("password", ["password123", "93847561029384", "root-admin-1"])
def test_createsuperuser_refuses_a_weak_password_from_the_environment(monkeypatch, password):
    # Django itself checks only a typed password; the deployment's scripted first admin is checked the same.
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", password)

    with pytest.raises(CommandError, match=r"DJANGO_SUPERUSER_PASSWORD: .*(too common|entirely numeric|too similar)"):
        call_command("createsuperuser", "--noinput", "--username", "root-admin", "--email", "root@example.com")

    assert not get_user_model().objects.filter(username="root-admin").exists()


def test_createsuperuser_takes_a_strong_password_from_the_environment(monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", STRONG)

    call_command("createsuperuser", "--noinput", "--username", "root-admin", "--email", "root@example.com")

    user = get_user_model().objects.get(username="root-admin")
    assert user.is_superuser and user.check_password(STRONG)


def test_the_demo_user_still_logs_in_with_demo_demo(client):
    # The one documented exception: a local demo's well-known login, set directly (it would fail every check).
    Demo()._ensure_demo_user()

    response = client.post("/login/", {"username": "demo", "password": "demo"})

    assert response.status_code == 302 and client.session["_auth_user_id"] == str(
        get_user_model().objects.get(username="demo").pk
    )
