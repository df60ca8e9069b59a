"""What every page's navigation shows besides links."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from .models import Flag


def review_queue(request: HttpRequest) -> dict[str, Any]:
    """The number of regression flags nobody has triaged yet: a callable, so only a page that shows it counts."""
    if not request.user.is_authenticated:
        return {}
    return {"untriaged_flags": lambda: Flag.objects.filter(triage=Flag.Triage.UNTRIAGED).count()}
