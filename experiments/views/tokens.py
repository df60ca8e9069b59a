"""The user's API tokens: the list, a new token (shown once), revoking one. Never cached: a token is a secret."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from ..actions.audit import Actor
from ..actions.tokens import do_issue_token, do_revoke_token
from ..models import ApiToken
from .access import requires

TOKEN_NAME_MAX = 100


@never_cache
@requires("experiments.add_apitoken")
def token_list(request: HttpRequest) -> HttpResponse:
    return render(request, "experiments/token_list.html", {"tokens": _tokens_of(request)})


@never_cache
@requires("experiments.add_apitoken")
@require_POST
def create_token(request: HttpRequest) -> HttpResponse:
    name = " ".join((request.POST.get("name") or "api").split())[:TOKEN_NAME_MAX] or "api"
    _, raw = do_issue_token(request.user, Actor.of(request), name=name)
    return render(request, "experiments/token_list.html", {"tokens": _tokens_of(request), "new_token": raw})


@requires("experiments.add_apitoken")
@require_POST
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken.objects.select_related("user"), pk=token_id)
    if token.user_id != request.user.pk and not request.user.has_perm("auth.change_user"):
        raise PermissionDenied("Only the token's owner or an admin may revoke it.")
    do_revoke_token(token, Actor.of(request))
    messages.success(request, f"Token “{token.name}” revoked; it no longer authenticates.")
    return redirect("token_list")


def _tokens_of(request: HttpRequest):
    return ApiToken.objects.filter(user=cast(User, request.user)).order_by("-created_at")
