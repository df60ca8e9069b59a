"""The user's API tokens: the list, and a new token, shown once."""

from __future__ import annotations

from typing import cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from ..models import ApiToken


@login_required
def token_list(request: HttpRequest) -> HttpResponse:
    return render(request, "experiments/token_list.html", {"tokens": _tokens_of(request)})


@login_required
@require_POST
def create_token(request: HttpRequest) -> HttpResponse:
    _, raw = ApiToken.issue(request.user, name=(request.POST.get("name") or "api")[:100])
    return render(request, "experiments/token_list.html", {"tokens": _tokens_of(request), "new_token": raw})


def _tokens_of(request: HttpRequest):
    return ApiToken.objects.filter(user=cast(User, request.user)).order_by("-created_at")
