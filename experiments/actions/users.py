"""Teammates: added by an admin with a set-password link, deactivated and reactivated, and their role (see
roles.py): one group of the four, or none. Every change is in the audit log, and the team always keeps an active
admin (a change that would leave it none is refused, so nobody needs the admin site or a shell to get back in).

A set-password link is Django's password-reset token (`default_token_generator`): it lives in no table, works
once (it hashes the password it replaces) for PASSWORD_RESET_TIMEOUT, and is refused for an inactive account.
"""

from __future__ import annotations

import logging
import smtplib
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.tokens import default_token_generator
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from .. import roles
from ..models import AuditEvent
from .audit import Actor, record_event
from .notifications import absolute_url

logger = logging.getLogger(__name__)

# Without EMAIL_HOST, mail goes to this backend, which only prints it into the server's log: no place for a link
# that sets a password. Any other backend (SMTP, or one a deployment names) sends.
CONSOLE_EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"


class TeamRefused(Exception):
    """A change the team's rules refuse; the message says why, in words for the admin who asked."""


def email_configured() -> bool:
    return settings.EMAIL_BACKEND != CONSOLE_EMAIL_BACKEND


def set_password_path(user: Any) -> str:
    """The path of a fresh set-password link for `user` (valid until they set a password or it expires)."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return reverse("set_password", args=[uid, default_token_generator.make_token(user)])


def link_days() -> int:
    return max(1, round(settings.PASSWORD_RESET_TIMEOUT / 86400))


@transaction.atomic
def do_add_teammate(username: str, email: str, role: str, actor: Actor) -> tuple[Any, bool]:
    """A new active account in `role`, without a usable password: the teammate sets one through a set-password
    link (`set_password_path`), which is also e-mailed to them on commit where this server sends e-mail (then
    the second value is True)."""
    if role not in roles.ORDER:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(roles.ORDER)}")
    _lock_admins()  # team changes one at a time: two admins adding "Alice" and "alice" at once get one of them
    users = get_user_model().objects
    if users.filter(username__iexact=username).exists():
        raise TeamRefused(f"The team has a {username} already (told apart regardless of case).")
    user = users.create_user(username, email=email)  # no password: an unusable one
    _put_in_role(user, role)
    emailed = _email_link_on_commit(user)
    record_event(actor, AuditEvent.Action.USER_ADD, user, role=role, email=user.email, emailed=emailed)
    return user, emailed


@transaction.atomic
def do_issue_password_link(user: Any, actor: Actor) -> bool:
    """Record that an admin made a new set-password link for `user` (who forgot theirs, or lost the first one);
    the link itself is never stored. True when it is also e-mailed to them."""
    if not user.is_active:
        raise TeamRefused(f"{user.get_username()} is deactivated: reactivate them first.")
    emailed = _email_link_on_commit(user)
    record_event(actor, AuditEvent.Action.PASSWORD_LINK, user, emailed=emailed)
    return emailed


@transaction.atomic
def do_set_password(user: Any, password: str, actor: Actor) -> None:
    """A teammate's own password, set through their link (the caller ran the password validators on it)."""
    user.set_password(password)
    user.save(update_fields=["password"])
    record_event(actor, AuditEvent.Action.PASSWORD_SET, user)


@transaction.atomic
def do_set_active(user: Any, active: bool, actor: Actor) -> None:
    """Deactivate (no login, no session, no API token, no set-password link works) or reactivate a teammate.
    Their experiments, runs and audit trail stay."""
    _lock_admins()
    user.refresh_from_db(fields=["is_active"])
    if user.is_active == active:
        return
    if not active:
        _keep_an_admin(user, stays_admin=False)
    user.is_active = active
    user.save(update_fields=["is_active"])
    action = AuditEvent.Action.USER_REACTIVATE if active else AuditEvent.Action.USER_DEACTIVATE
    record_event(actor, action, user)


@transaction.atomic
def do_set_role(user: Any, role: str | None, actor: Actor) -> None:
    """Make `role` the user's only role (None: no role at all). Admins get into the admin site to manage users."""
    if role is not None and role not in roles.ORDER:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(roles.ORDER)}")
    _lock_admins()
    before = roles.highest(user.groups.values_list("name", flat=True))
    if before != role:
        _keep_an_admin(user, stays_admin=role == roles.ADMIN or user.is_superuser)
    _put_in_role(user, role)
    if before != role:
        record_event(actor, AuditEvent.Action.ROLES, user, before=before, after=role)


def _put_in_role(user: Any, role: str | None) -> None:
    user.groups.remove(*Group.objects.filter(name__in=roles.ORDER))
    if role is not None:
        user.groups.add(roles.group_of(role))
    user.is_staff = role == roles.ADMIN or user.is_superuser
    user.save(update_fields=["is_staff"])


def _lock_admins() -> None:
    """Changes to the team run one at a time: two admins demoting each other at once would otherwise each see
    the other still there."""
    roles.group_of(roles.ADMIN)  # made again where a test database was flushed
    list(Group.objects.select_for_update().filter(name=roles.ADMIN))


def _keep_an_admin(user: Any, *, stays_admin: bool) -> None:
    """Refuse a change after which `user`, the team's only active admin, would be one no longer."""
    admins = get_user_model().objects.filter(Q(is_superuser=True) | Q(groups__name=roles.ADMIN), is_active=True)
    if stays_admin or not admins.filter(pk=user.pk).exists():
        return
    if not admins.exclude(pk=user.pk).exists():
        raise TeamRefused(
            f"{user.get_username()} is the team's only active admin: make another teammate an admin first, "
            "so that someone can still manage the team."
        )


def _email_link_on_commit(user: Any) -> bool:
    """Send the teammate a set-password link of their own after the commit, where this server sends e-mail and
    they have an address; True if one is on its way. A failure is logged: the admin holds the link too."""
    if not (user.email and email_configured()):
        return False
    user_id = user.pk
    transaction.on_commit(lambda: _email_link(user_id))
    return True


def _email_link(user_id: int) -> None:
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None or not user.email:
        return
    body = (
        f"You have a specdash account, with the username {user.get_username()}.\n\n"
        f"Set your password here (the link works once, for {link_days()} days):\n\n"
        f"{absolute_url(set_password_path(user))}\n\n"
        f"Then log in at {absolute_url(reverse('login'))}\n"
    )
    try:
        send_mail("Your specdash account: set your password", body, settings.DEFAULT_FROM_EMAIL, [user.email])
    except (OSError, smtplib.SMTPException) as exc:
        logger.warning("The set-password e-mail to user %s was not sent: %s", user_id, exc or type(exc).__name__)
