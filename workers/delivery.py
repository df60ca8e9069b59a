"""E-mail and webhook transport: sending one pending delivery, whose attempt the actions record. Webhook hosts are
the admin's allowlisted choice (checked when subscribing); a redirect elsewhere is refused, never followed.

Right before each webhook delivery the URL's host is resolved and every address checked again by
experiments.rules.webhook_targets (a name may point elsewhere since it was saved); the connection then goes to a
checked address, so a name that changes between the check and the connection (DNS rebinding) cannot move it. The
log keeps the HTTP status of a refusal, never the body, and a connection failure in one word."""

from __future__ import annotations

import http.client
import json
import smtplib
import socket
import ssl
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings
from django.core.mail import send_mail

from experiments.actions.notifications import do_record_delivery_attempt
from experiments.formats.notification_texts import Message
from experiments.models import Delivery, Subscription
from experiments.rules import webhook_targets

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
        post_webhook(delivery.destination, message.webhook_json(), address=checked_address(delivery.destination))
    else:
        raise DeliveryRefused(f"{delivery.channel} deliveries are not sent by a worker")


def checked_address(url: str) -> str:
    """The address a webhook may post to now: its host resolved, every address allowed. Raises DeliveryRefused."""
    problem = webhook_targets.url_refusal(url)
    if problem:
        raise DeliveryRefused(f"Refused: {problem}")
    addresses = webhook_targets.resolve(*webhook_targets.endpoint(url))
    allowed = webhook_targets.networks(settings.SPECDASH_WEBHOOK_ALLOWED_NETWORKS)
    problem = webhook_targets.target_refusal(url, addresses, allowed)
    if problem:
        raise DeliveryRefused(f"Refused: {problem}")
    return addresses[0]


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _pinned(connection_class: type[http.client.HTTPConnection], address: str):
    """A connection class for urllib that connects to `address` whatever the URL's host resolves to now (TLS still
    verifies the certificate against the URL's host name)."""

    def connect(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        connection = connection_class(host, **kwargs)
        default = connection._create_connection  # type: ignore[attr-defined]
        connection._create_connection = (  # type: ignore[attr-defined]
            lambda where, *args: default((address, where[1]), *args)
        )
        return connection

    return connect


class _PinnedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def http_open(self, req):
        return self.do_open(_pinned(http.client.HTTPConnection, self.address), req)


class _PinnedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, address: str) -> None:
        super().__init__(context=ssl.create_default_context())
        self.address = address

    def https_open(self, req):
        return self.do_open(
            _pinned(http.client.HTTPSConnection, self.address),
            req,
            context=self._context,  # type: ignore[attr-defined]
        )


def _opener(address: str) -> urllib.request.OpenerDirector:
    # No proxy from the environment: the checked address is the one connected to.
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), _NoRedirects, _PinnedHTTPHandler(address), _PinnedHTTPSHandler(address)
    )


def post_webhook(url: str, payload: dict[str, Any], *, address: str) -> None:
    """POST `payload` to `url`, connecting to `address` (checked_address). Raises OSError or DeliveryRefused."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "specdash-notifications"},
        method="POST",
    )
    try:
        with _opener(address).open(request, timeout=WEBHOOK_TIMEOUT) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        exc.close()  # its body (what the receiver said) is neither read nor kept
        raise DeliveryRefused(f"The webhook answered HTTP {exc.code}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryRefused(f"The webhook could not be reached ({_in_a_word(exc)})") from None
    if not 200 <= status < 300:
        raise DeliveryRefused(f"The webhook answered HTTP {status}")


def _in_a_word(exc: BaseException) -> str:
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(reason, ssl.SSLError):
        return "TLS failed"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    return "connection failed"
