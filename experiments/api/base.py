"""What every part of the JSON API shares: the API object, token authentication, permission checks, and reading
configs, profiles and hosts given inline or by id."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI
from ninja.errors import HttpError
from ninja.security import HttpBearer, django_auth

from ..forms import (
    BenchmarkProfileForm,
    apply_profile_defaults,
    config_form_data,
    profile_form_data,
)
from ..models import ApiToken, BenchmarkProfile, Experiment, Host, ServerConfig


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        api_token = ApiToken.objects.matching(token).select_related("user").first()
        if api_token is None or not api_token.user.is_active:
            return None
        api_token.touch()
        request.user = api_token.user
        # The audit log names the token a change came through.
        request.api_token = api_token  # type: ignore[attr-defined]
        return api_token.user


def _viewers_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The schema and the docs page, like every endpoint: 401 without a session or token, 403 below the viewer
    role (the schema maps every operation and field an attacker would probe)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user if request.user.is_authenticated else BearerToken()(request)
        if not user:
            return JsonResponse({"detail": "Unauthorized"}, status=401)
        if not user.has_perm(DOCS_PERMISSION):
            return JsonResponse({"detail": f"Your role does not allow this (it needs {DOCS_PERMISSION})."}, status=403)
        return view(request, *args, **kwargs)

    return wrapper


DOCS_PERMISSION = "experiments.view_experiment"  # every role from viewer up holds it

api = NinjaAPI(
    title="specdash API",
    version="1",
    auth=[BearerToken(), django_auth],
    urls_namespace="api",
    docs_decorator=_viewers_only,
)


def require(request: HttpRequest, perm: str) -> None:
    """403 unless the user's role grants `perm` (see roles.py)."""
    if not request.user.has_perm(perm):
        raise HttpError(403, f"Your role does not allow this (it needs {perm}).")


def require_manage(request: HttpRequest, experiment: Experiment) -> None:
    if not experiment.can_be_managed_by(request.user):
        raise HttpError(403, "Only the experiment's owner or a maintainer may do this.")


def config_data(value: dict[str, Any] | int, path: str) -> dict[str, Any]:
    if isinstance(value, int):
        config = ServerConfig.objects.filter(pk=value).first()
        if config is None:
            raise HttpError(422, f"{path}: no config with id {value}")
        return config_form_data({**config.launch_spec(), "name": config.name})
    return config_form_data(value)


def profile_data(value: dict[str, Any] | int) -> dict[str, Any]:
    if isinstance(value, int):
        profile = BenchmarkProfile.objects.filter(pk=value).first()
        if profile is None:
            raise HttpError(422, f"profile: no profile with id {value}")
        value = {f: getattr(profile, f) for f in (*BenchmarkProfileForm.Meta.fields, "concurrency")}
    return profile_form_data(apply_profile_defaults(value))


def host_name(value: str | int) -> str:
    if isinstance(value, int):
        host = Host.objects.filter(pk=value).first()
        return host.name if host else str(value)
    return value


def api_user(request: HttpRequest):
    """The authenticated user (every endpoint requires auth; the type checker cannot know that)."""
    assert request.user.is_authenticated
    return request.user
