"""API tokens: issued to their owner (shown once), revoked by their owner or an admin."""

from __future__ import annotations

from django.db import transaction

from ..models import ApiToken, AuditEvent
from .audit import Actor, record_event


@transaction.atomic
def do_issue_token(user, actor: Actor, name: str = "api") -> tuple[ApiToken, str]:
    token, raw = ApiToken.issue(user, name=name)
    record_event(actor, AuditEvent.Action.TOKEN_CREATE, token, user=user.get_username(), name=name)
    return token, raw


@transaction.atomic
def do_revoke_token(token: ApiToken, actor: Actor) -> None:
    record_event(actor, AuditEvent.Action.TOKEN_REVOKE, token, user=token.user.get_username(), name=token.name)
    token.delete()
