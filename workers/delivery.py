"""E-mail and webhook transport: sending one pending delivery, whose attempt the actions record. Webhook hosts are
the admin's allowlisted choice (checked when subscribing); a redirect elsewhere is refused, never followed."""

from __future__ import annotations

import json
import smtplib
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings
from django.core.mail import send_mail

from experiments.actions.notifications import do_record_delivery_attempt
from experiments.formats.notification_texts import Message
from experiments.models import Delivery, Subscription

WEBHOOK_TIMEOUT = 10


class DeliveryRefused(Exception):
    """The receiver answered, but not with success."""


def deliver(delivery: Delivery, *, last_attempt: bool) -> bool:
    """Send a pending e-mail or webhook delivery once and record the attempt; True if it went out."""
    try:
        send(delivery)
    except (OSError, smtplib.SMTPException, DeliveryRefused) as exc:
        return do_record_delivery_attempt(delivery, error=str(exc) or type(exc).__name__, last_attempt=last_attempt)
    return do_record_delivery_attempt(delivery, error=None, last_attempt=last_attempt)


def send(delivery: Delivery) -> None:
    """Raises OSError, SMTPException or DeliveryRefused when it did not go out."""
    if delivery.channel == Subscription.Channel.EMAIL:
        body = f"{delivery.body}\n\n{delivery.url}\n"
        send_mail(delivery.subject, body, settings.DEFAULT_FROM_EMAIL, [delivery.destination])
    elif delivery.channel == Subscription.Channel.WEBHOOK:
        message = Message(delivery.event, delivery.subject, delivery.body, delivery.url)
        post_webhook(delivery.destination, message.webhook_json())
    else:
        raise DeliveryRefused(f"{delivery.channel} deliveries are not sent by a worker")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def post_webhook(url: str, payload: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "specdash-notifications"},
        method="POST",
    )
    try:
        with _OPENER.open(request, timeout=WEBHOOK_TIMEOUT) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        raise DeliveryRefused(f"The webhook answered HTTP {exc.code}") from exc
    if not 200 <= status < 300:
        raise DeliveryRefused(f"The webhook answered HTTP {status}")
