"""Logins in the audit log: who logged in, which logins failed and which were locked out (django-axes throttles
them; settings.py says when). Django and axes announce these by signal only, so the receivers live here and are
connected once, by the app's ready()."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.http import HttpRequest

from ..models import AuditEvent
from .audit import record_login_event


def do_record_login(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    # `force_login` (tests, no request) and API tokens never pass here: only the login form does.
    if request is not None:
        record_login_event(request, AuditEvent.Action.LOGIN, user.get_username(), user)


def do_record_login_failure(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    # Only the username is read: Django masks the password in `credentials`, and it is never stored anyway.
    if request is None or getattr(request, "axes_locked_out", False):
        return  # a locked-out attempt is recorded once, as a lockout
    record_login_event(request, AuditEvent.Action.LOGIN_FAILED, _username(credentials.get("username")))


def do_record_lockout(sender: Any, request: HttpRequest | None, username: Any, **kwargs: Any) -> None:
    if request is not None:
        record_login_event(request, AuditEvent.Action.LOCKOUT, _username(username))


def _username(value: Any) -> str:
    return value if isinstance(value, str) else ""


def connect() -> None:
    from axes.signals import user_locked_out

    user_logged_in.connect(do_record_login, dispatch_uid="specdash-audit-login")
    user_login_failed.connect(do_record_login_failure, dispatch_uid="specdash-audit-login-failed")
    user_locked_out.connect(do_record_lockout, dispatch_uid="specdash-audit-lockout")
