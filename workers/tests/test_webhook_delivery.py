"""The worker's side of webhook targets: right before each delivery it resolves the URL's host again, refuses an
address that is not public (or allowed), connects to the address it checked, and logs a failure's HTTP status or
kind, never what the receiver answered."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings

from experiments.actions.hosts import do_mark_host_dirty
from experiments.models import Delivery
from experiments.rules import webhook_targets
from experiments.tests.factories import make_host
from experiments.tests.test_notifications import _subscribe
from workers import delivery as delivery_transport

# The receiver listens on loopback, which webhooks may reach only where an admin allowed it.
LOCAL_RECEIVER = override_settings(SPECDASH_WEBHOOK_ALLOWED_NETWORKS=("127.0.0.1/32",))


@pytest.fixture
def dns(monkeypatch) -> dict[str, list[str]]:
    """What names resolve to (the sandbox has no DNS): the test sets it, every check reads it."""
    table: dict[str, list[str]] = {}
    monkeypatch.setattr(webhook_targets, "resolve", lambda host, port: table.get(host, []))
    return table


def _queued_delivery(owner, target: str) -> Delivery:
    # Saved as the form would have taken it when the name still pointed outward.
    _subscribe(owner, "webhook", ["host_dirty"], team=True, target=target)
    with transaction.atomic():
        do_mark_host_dirty(make_host(name="gpu-2"), "held")
    return Delivery.objects.get()


@pytest.mark.django_db
def test_the_worker_refuses_a_name_that_now_resolves_to_loopback(owner, receiver, dns):
    hook, url = receiver
    port = url.split(":")[2].split("/")[0]
    dns["hooks.example.org"] = ["127.0.0.1"]  # it was public when saved; DNS moved it
    delivery = _queued_delivery(owner, f"http://hooks.example.org:{port}/hooks/team")

    assert delivery_transport.deliver(delivery, last_attempt=True) is False

    delivery.refresh_from_db()
    assert delivery.state == Delivery.State.FAILED
    assert delivery.last_error.startswith("Refused: 127.0.0.1 is a loopback address")
    assert hook.bodies == []  # nothing reached the loopback service


@pytest.mark.django_db
def test_the_worker_refuses_a_stored_loopback_url_unless_its_network_is_allowed(owner, receiver, settings):
    hook, url = receiver
    delivery = _queued_delivery(owner, url)

    assert delivery_transport.deliver(delivery, last_attempt=False) is False
    assert hook.bodies == []
    settings.SPECDASH_WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.1/32",)
    assert delivery_transport.deliver(delivery, last_attempt=False) is True
    assert len(hook.bodies) == 1


@LOCAL_RECEIVER
@pytest.mark.django_db
def test_the_worker_connects_to_the_address_it_checked(owner, receiver, dns):
    """The name resolves only in the check's table: the post goes to the checked address, not to a second lookup
    (which a name that rebinds between the two would win)."""
    hook, url = receiver
    port = url.split(":")[2].split("/")[0]
    dns["hooks.only-in-the-check.test"] = ["127.0.0.1"]
    delivery = _queued_delivery(owner, f"http://hooks.only-in-the-check.test:{port}/hooks/team")

    assert delivery_transport.deliver(delivery, last_attempt=True) is True
    assert len(hook.bodies) == 1


@LOCAL_RECEIVER
@pytest.mark.django_db
def test_the_log_keeps_a_failures_status_or_kind_never_more(owner, receiver):
    hook, url = receiver
    hook.failures = 1
    closed = url.rsplit(":", 1)[0] + ":1/hooks/team"  # nothing listens on port 1
    delivery = _queued_delivery(owner, url)

    delivery_transport.deliver(delivery, last_attempt=False)
    delivery.refresh_from_db()
    assert delivery.last_error == "The webhook answered HTTP 503"
    Delivery.objects.filter(pk=delivery.pk).update(destination=closed)
    delivery.refresh_from_db()
    delivery_transport.deliver(delivery, last_attempt=False)
    delivery.refresh_from_db()
    assert delivery.last_error == "The webhook could not be reached (connection refused)"
