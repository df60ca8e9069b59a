"""The notification task: it sends one pending delivery, and records what happened."""

from __future__ import annotations

import pytest
from django.core import mail
from django.test import override_settings

from experiments.actions.audit import Actor
from experiments.actions.hosts import do_mark_host_dirty
from experiments.actions.notifications import do_subscribe
from experiments.models import Delivery, Subscription
from experiments.tests.factories import make_host
from experiments.tests.test_notifications import _subscribe
from workers import delivery as delivery_transport
from workers.tasks import deliver_notification


@pytest.mark.django_db(transaction=True)
def test_an_e_mail_delivery_is_sent_by_the_task(owner, private_queue):
    """(Transactional: the task closes the connection it finds, as a worker's task does.)"""
    host = make_host(name="gpu-7")
    subscription = Subscription(user=None, channel="email", events=["host_dirty"], target="ops@example.org")
    do_subscribe(subscription, Actor(owner))
    do_mark_host_dirty(host, "pid 7 still holds 1000 MiB")

    deliver_notification.apply(args=[Delivery.objects.get().pk])

    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    assert sent.to == ["ops@example.org"]
    assert sent.subject.startswith("[specdash] Host gpu-7 is dirty")
    assert f"/hosts/{host.pk}/" in sent.body
    delivery = Delivery.objects.get()
    assert delivery.state == Delivery.State.SENT and delivery.attempts == 1


@pytest.mark.django_db(transaction=True)
def test_a_delivery_already_sent_is_not_sent_again(owner, private_queue):
    subscription = Subscription(user=None, channel="email", events=["host_dirty"], target="ops@example.org")
    do_subscribe(subscription, Actor(owner))
    do_mark_host_dirty(make_host(), "held")
    delivery = Delivery.objects.get()
    deliver_notification.apply(args=[delivery.pk])

    deliver_notification.apply(args=[delivery.pk])  # a redelivered task message

    assert len(mail.outbox) == 1


# ---- webhooks --------------------------------------------------------------------------------------------------


# The receiver listens on loopback, which webhooks may reach only where an admin allowed it.
LOCAL_RECEIVER = override_settings(SPECDASH_WEBHOOK_ALLOWED_NETWORKS=("127.0.0.1/32",))


@LOCAL_RECEIVER
@pytest.mark.django_db
def test_a_webhook_that_fails_is_retried_and_its_attempts_logged(owner, receiver):
    hook, url = receiver
    hook.failures = 1
    _subscribe(owner, "webhook", ["host_dirty"], team=True, target=url)
    do_mark_host_dirty(make_host(name="gpu-9"), "held")
    delivery = Delivery.objects.get()

    assert delivery_transport.deliver(delivery, last_attempt=False) is False
    assert delivery_transport.deliver(delivery, last_attempt=False) is True

    delivery.refresh_from_db()
    assert delivery.state == Delivery.State.SENT and delivery.attempts == 2
    assert delivery.last_error == "The webhook answered HTTP 503"
    assert hook.bodies[0]["text"].startswith("*[specdash] Host gpu-9 is dirty")
    assert hook.bodies[0]["specdash"]["event"] == "host_dirty"


@LOCAL_RECEIVER
@pytest.mark.django_db
def test_a_webhook_that_redirects_is_not_followed_and_the_last_failure_is_final(owner, receiver):
    hook, url = receiver
    hook.location = "http://169.254.169.254/latest/meta-data/"
    _subscribe(owner, "webhook", ["host_dirty"], team=True, target=url)
    do_mark_host_dirty(make_host(), "held")
    delivery = Delivery.objects.get()

    assert delivery_transport.deliver(delivery, last_attempt=True) is False

    delivery.refresh_from_db()
    assert delivery.state == Delivery.State.FAILED and "HTTP 302" in delivery.last_error
    assert hook.bodies == []
