"""Login throttling (django-axes): when a login is locked out, and what a locked-out login sees.

Two locks. axes's own counts the failures of one username from one address (SPECDASH_LOGIN_FAILURE_LIMIT), so a
mistyping user is stopped without touching anyone else. `LoginThrottle` adds one per account, counting failures
from every address (SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT, higher): a guess spread over many addresses, each under
the first limit, still locks the account for the cool-off. Both count the failures whose latest attempt from that
address is within the cool-off, and both lift when it has passed or an admin resets the username."""

from __future__ import annotations

from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib import messages
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from experiments.forms import LoginForm


class LoginThrottle(AxesDatabaseHandler):
    """axes's database handler (the lock per username and address) with the lock per account added."""

    def is_locked(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> bool:
        if super().is_locked(request, credentials):
            return True
        return self._account_locked(request, credentials)

    def user_login_failed(self, sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
        super().user_login_failed(sender, credentials, request, **kwargs)
        # The failure that reaches the account's limit is answered as a lockout, as axes answers the one that
        # reaches the address's.
        if request is not None and not getattr(request, "axes_locked_out", False):
            if self._account_locked(request, credentials):
                request.axes_locked_out = True
                request.axes_credentials = credentials

    def _account_locked(self, request: Any, credentials: dict[str, Any] | None) -> bool:
        username = get_client_username(request, credentials)
        if not username or not hasattr(request, "axes_attempt_time"):
            return False
        recent = AccessAttempt.objects.filter(username=username, attempt_time__gte=get_cool_off_threshold(request))
        failures = recent.aggregate(total=Sum("failures_since_start"))["total"] or 0
        locked = failures >= settings.SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT
        if locked:
            request.specdash_account_locked = True  # the page says which lock (lockout_response)
        return locked


def lockout_response(request: HttpRequest, *args: Any) -> HttpResponse:
    """The login page again, saying why and for how long, with 429 Too Many Requests."""
    # (axes passes the original response and the credentials, or only the credentials on its async path.)
    minutes = round(settings.AXES_COOLOFF_TIME.total_seconds() / 60)
    if getattr(request, "specdash_account_locked", False):
        why = "Too many failed logins for this username, from several addresses."
    else:
        why = "Too many failed logins for this username from your address."
    messages.error(request, f"{why} Try again in {minutes} minutes, or ask an admin to unlock it.")
    username = request.POST.get("username", "")[:150]
    form = LoginForm(request, initial={"username": username})
    context = {"form": form, "next": request.POST.get("next", "")}
    return render(request, "registration/login.html", context, status=429)
