"""Who does what: the actor of every state change and the audit log it leaves.

Every action a person causes takes an `Actor` and records one `AuditEvent` in the same transaction, so a change
and its record are never apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models
from django.http import HttpRequest

from ..models import ApiToken, AuditEvent


@dataclass(frozen=True)
class Actor:
    user: Any  # the User; typed loosely for the auth user model's sake
    ip: str | None = None
    token: ApiToken | None = None
    via: str = "web"

    @classmethod
    def of(cls, request: HttpRequest) -> Actor:
        """The request's user, address and, for the API, the token it authenticated with."""
        token = getattr(request, "api_token", None)
        via = "api" if token is not None or request.path.startswith("/api/") else "web"
        return cls(request.user, request.META.get("REMOTE_ADDR") or None, token, via)

    @classmethod
    def command(cls, user: AbstractBaseUser | AnonymousUser | None = None) -> Actor:
        """An operator at a `manage.py` command (on a machine of the deployment)."""
        return cls(user, None, None, "command")


SCHEDULER = Actor(None, None, None, "schedule")  # the beat, launching an experiment's scheduled runs
ANALYSIS = Actor(None, None, None, "analysis")  # the history check: confirming runs, suspicions, flags


def record_event(actor: Actor, action: str, target: models.Model, **detail: Any) -> AuditEvent:
    return _create(actor, action, target._meta.model_name or "", target.pk, str(target), detail)


def record_login_event(request: HttpRequest, action: str, username: str, user: Any = None) -> AuditEvent:
    """A login, a failed login or a locked-out one, about the username typed (bounded; the password is never
    passed here). `user` is the account when the login succeeded; a failure names no account, so the log does not
    say which usernames exist."""
    name = username[:LOGGED_USERNAME_MAX]
    actor = Actor(user, request.META.get("REMOTE_ADDR") or None, None, "web")
    return _create(actor, action, "user", user.pk if user is not None else None, name, {"username": name})


LOGGED_USERNAME_MAX = 150  # Django's own bound on a username; anything longer was never a username


def _create(actor: Actor, action: str, target_type: str, target_id: Any, label: str, detail: dict) -> AuditEvent:
    user = actor.user if actor.user is not None and actor.user.is_authenticated else None
    return AuditEvent.objects.create(
        actor=user,
        actor_name=user.get_username() if user else "",
        ip=actor.ip,
        token=actor.token,
        token_name=actor.token.name if actor.token else "",
        via=actor.via,
        action=action,
        target_type=target_type,
        target_id=target_id,
        target_label=label[:255],
        detail=detail,
    )
