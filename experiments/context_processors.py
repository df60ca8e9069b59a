"""What every page's navigation shows besides links."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from . import roles
from .models import Flag


def review_queue(request: HttpRequest) -> dict[str, Any]:
    """The user's role, and the number of regression flags nobody has triaged yet (for those who see flags).

    Callables, so only a page that shows them queries."""
    user = request.user
    if not user.is_authenticated:
        return {}
    context: dict[str, Any] = {"user_role": lambda: roles.role_of(user)}
    if user.has_perm("experiments.view_flag"):
        context["untriaged_flags"] = lambda: Flag.objects.filter(triage=Flag.Triage.UNTRIAGED).count()
    return context
