"""Team webhooks post only to public addresses (or networks an admin allowed): refused when an admin saves one
that points inward, and again by the worker right before each delivery, which connects to the address it checked.
The delivery log tells no one but admins why a delivery failed (workers/tests/test_webhook_delivery.py: the
worker's side)."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.urls import reverse

from experiments.actions.hosts import do_mark_host_dirty
from experiments.models import Delivery, Subscription
from experiments.rules import webhook_targets

from .factories import make_host
from .test_notifications import _subscribe


@pytest.fixture
def dns(monkeypatch) -> dict[str, list[str]]:
    """What names resolve to (the sandbox has no DNS): the test sets it, every check reads it."""
    table: dict[str, list[str]] = {}
    monkeypatch.setattr(webhook_targets, "resolve", lambda host, port: table.get(host, []))
    return table


# ---- the rule --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("169.254.169.254", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "private"),  # reserved: Python files it under private
        ("100.64.0.1", "non-public"),  # carrier-grade NAT
        ("192.0.2.10", "private"),  # documentation
        ("::ffff:127.0.0.1", "loopback"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("64:ff9b::a00:5", "private"),  # NAT64 of 10.0.0.5
    ],
)
def test_it_refuses_every_address_that_is_not_public(address, kind):
    problem = webhook_targets.address_refusal(address)

    assert problem is not None and f" {kind} address" in problem
    assert "SPECDASH_WEBHOOK_ALLOWED_NETWORKS" in problem


@pytest.mark.parametrize("address", ["3.33.200.10", "8.8.8.8", "2606:4700::1111"])
def test_it_allows_public_addresses(address):
    assert webhook_targets.address_refusal(address) is None


def test_it_allows_an_allowed_network_and_nothing_beside_it():
    allowed = webhook_targets.networks(["10.20.0.0/16", " ", "fd00::5"])

    assert webhook_targets.address_refusal("10.20.3.4", allowed) is None
    assert webhook_targets.address_refusal("fd00::5", allowed) is None
    assert webhook_targets.address_refusal("10.21.0.1", allowed) is not None
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33' is not an IP network"):
        webhook_targets.networks(["10.0.0.0/33"])


def test_it_refuses_a_name_if_any_of_its_addresses_is_not_public():
    url = "https://hooks.example.org/x"

    assert webhook_targets.target_refusal(url, ["3.33.200.10"]) is None
    assert "loopback" in (webhook_targets.target_refusal(url, ["3.33.200.10", "127.0.0.1"]) or "")
    assert "does not resolve" in (webhook_targets.target_refusal(url, []) or "")


@pytest.mark.parametrize(
    "url", ["gopher://3.33.200.10/x", "file:///etc/passwd", "ftp://3.33.200.10/", "http:///x", "http://h:99999/"]
)
def test_it_refuses_urls_that_are_not_http_to_a_host(url):
    assert webhook_targets.target_refusal(url, ["3.33.200.10"]) is not None


# ---- an admin saving a webhook -----------------------------------------------------------------------------------


def _post_webhook(client, target: str):
    return client.post(
        reverse("notification_settings"),
        {"channel": "webhook", "events": ["host_dirty"], "team": "on", "target": target},
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("https://127.0.0.1:6379/", "127.0.0.1 is a loopback address"),
        ("https://[::1]:22/", "::1 is a loopback address"),
        ("https://169.254.169.254/latest/meta-data/", "is a link-local address"),
        ("https://10.0.0.5:8080/hook", "10.0.0.5 is a private address"),
        ("https://internal.example.org:5432/", "10.1.2.3 is a private address"),  # a name resolving inward
        ("https://split.example.org/", "127.0.0.1 is a loopback address"),  # one public, one loopback address
        ("https://gone.example.org/", "does not resolve"),
        ("https://hooks.example.org:99999/", "cannot be read (its host or port)"),
    ],
)
def test_an_admin_cannot_point_a_webhook_inward(client, owner, dns, target, says):
    dns.update(
        {
            "127.0.0.1": ["127.0.0.1"],
            "::1": ["::1"],
            "169.254.169.254": ["169.254.169.254"],
            "10.0.0.5": ["10.0.0.5"],
            "internal.example.org": ["10.1.2.3"],
            "split.example.org": ["3.33.200.10", "127.0.0.1"],
        }
    )
    client.force_login(owner)

    response = _post_webhook(client, target)

    assert response.status_code == 400
    assert says in response.content.decode()
    assert not Subscription.objects.exists()


@pytest.mark.django_db
def test_an_admin_cannot_point_a_webhook_at_localhost_as_the_system_resolves_it(client, owner):
    client.force_login(owner)

    response = _post_webhook(client, "https://localhost:5432/")

    assert response.status_code == 400 and "loopback address" in response.content.decode()
    assert not Subscription.objects.exists()


@pytest.mark.django_db
def test_an_admin_points_a_webhook_at_a_public_host_or_an_allowed_network(client, owner, dns, settings):
    dns.update({"hooks.example.org": ["3.33.200.10"], "relay.corp.example": ["10.20.0.7"]})
    client.force_login(owner)

    assert _post_webhook(client, "https://hooks.example.org/T/B/x").status_code == 302
    assert _post_webhook(client, "https://relay.corp.example/slack").status_code == 400
    settings.SPECDASH_WEBHOOK_ALLOWED_NETWORKS = ("10.20.0.0/16",)
    assert _post_webhook(client, "https://relay.corp.example/slack").status_code == 302

    assert Subscription.objects.count() == 2


# ---- the delivery log ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_only_admins_read_why_a_delivery_failed(client, member, owner):
    member.email = "member@example.org"
    member.save()
    _subscribe(member, "email", ["host_dirty"])
    with transaction.atomic():
        do_mark_host_dirty(make_host(), "held")
    Delivery.objects.update(last_error="[Errno 111] Connection refused to 10.0.0.5:25", state="failed")

    client.force_login(member)
    mine = client.get(reverse("notification_settings")).content.decode()
    client.force_login(owner)
    admins = client.get(reverse("notification_settings")).content.decode()

    assert "10.0.0.5:25" not in mine and "not delivered (an admin sees why)" in mine
    assert "10.0.0.5:25" in admins


def test_a_bad_allowed_network_fails_the_system_checks(settings):
    from django.core import checks

    settings.SPECDASH_WEBHOOK_ALLOWED_NETWORKS = ("10.0.0.0/8", "relay.internal")

    errors = [e for e in checks.run_checks() if e.id == "specdash.E010"]

    assert len(errors) == 1 and "'relay.internal' is not an IP network" in errors[0].msg
