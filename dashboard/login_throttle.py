"""What a locked-out login sees (django-axes calls `lockout_response`; settings say when a login is locked out)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from experiments.forms import LoginForm


def lockout_response(request: HttpRequest, *args: Any) -> HttpResponse:
    """The login page again, saying why and for how long, with 429 Too Many Requests."""
    # (axes passes the original response and the credentials, or only the credentials on its async path.)
    minutes = round(settings.AXES_COOLOFF_TIME.total_seconds() / 60)
    messages.error(
        request,
        f"Too many failed logins for this username from your address. Try again in {minutes} minutes, "
        "or ask an admin to unlock it.",
    )
    username = request.POST.get("username", "")[:150]
    form = LoginForm(request, initial={"username": username})
    context = {"form": form, "next": request.POST.get("next", "")}
    return render(request, "registration/login.html", context, status=429)
