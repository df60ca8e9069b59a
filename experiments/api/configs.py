"""Stored server configs and benchmark profiles."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Status

from experiments import serializers
from experiments.reads import config_history

from ..actions.audit import Actor
from ..actions.configs import do_create_config, do_create_profile
from ..forms import BenchmarkProfileForm, ServerConfigForm, config_form_data, plain_errors
from ..models import BenchmarkProfile, ServerConfig
from .base import api, profile_data, require
from .bodies import ConfigIn, NamedProfileIn
from .refusals import documented, refused, responses, status_of

PROFILE_NAME_MAX = BenchmarkProfile._meta.get_field("name").max_length or 128


@api.get("/configs")
def list_configs(request: HttpRequest, response: HttpResponse, limit: int = 200, q: str = "", page: int = 1):
    """Newest first, `limit` a page (at most 1000); `q` searches names, model paths and hash prefixes (as the Configs
    page does). The body stays the list it always was: `page` picks a page (past the last: the last), and the
    `X-Count`, `X-Page` and `X-Pages` headers say what `GET /api/experiments` says in its `count`, `page`, `pages`."""
    require(request, "experiments.view_serverconfig")
    shown = Paginator(config_history.search_configs(q[:200]), min(max(limit, 1), 1000)).get_page(max(page, 1))
    response["X-Count"] = str(shown.paginator.count)
    response["X-Page"] = str(shown.number)
    response["X-Pages"] = str(shown.paginator.num_pages)
    return [serializers.config_json(c) for c in shown.object_list]


@api.get("/configs/{config_id}")
def get_config(request: HttpRequest, config_id: int):
    """One config with the config it was derived from, its other versions (and what differs) and its runs."""
    require(request, "experiments.view_serverconfig")
    return serializers.config_history_json(get_object_or_404(ServerConfig, pk=config_id))


@api.post("/configs", response=responses(201, 403, 404, 409), openapi_extra=documented(403, 404, 409))
def create_config(request: HttpRequest, payload: ConfigIn):
    require(request, "experiments.add_serverconfig")
    form = ServerConfigForm(config_form_data(payload.form_payload()))
    if not form.is_valid():
        return refused("invalid config", plain_errors(form), status_of([form]))
    # The very same stored config (same name and content) is reused, not re-owned.
    config = do_create_config(Actor.of(request), form.save_unsaved())
    return Status(201, serializers.config_json(config))


@api.get("/profiles")
def list_profiles(request: HttpRequest, limit: int = 200, q: str = ""):
    require(request, "experiments.view_benchmarkprofile")
    return [serializers.profile_json(p) for p in config_history.search_profiles(q[:200])[: min(max(limit, 1), 1000)]]


@api.post("/profiles", response=responses(201, 404, 409), openapi_extra=documented(404, 409))
def create_profile(request: HttpRequest, payload: NamedProfileIn):
    require(request, "experiments.add_benchmarkprofile")
    name = payload.name.strip()
    fields = payload.form_payload()
    fields.pop("name")
    form = BenchmarkProfileForm(profile_data(fields))
    name_problem = "This field is required." if not name else None
    if len(name) > PROFILE_NAME_MAX:
        name_problem = f"Ensure this value has at most {PROFILE_NAME_MAX} characters."
    if not form.is_valid() or name_problem:
        errors = plain_errors(form) if form.errors else {}
        if name_problem:
            errors["name"] = [name_problem]
        return refused("invalid profile", errors, 422 if name_problem else status_of([form]))
    profile = do_create_profile(Actor.of(request), form.save_unsaved(name=name))
    return Status(201, serializers.profile_json(profile))
