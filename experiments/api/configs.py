"""Stored server configs and benchmark profiles."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Body, Status

from experiments.api import serializers
from experiments.reads import config_history

from ..actions.audit import Actor
from ..actions.configs import do_create_config, do_create_profile
from ..forms import (
    BenchmarkProfileForm,
    ServerConfigForm,
    apply_profile_defaults,
    config_form_data,
    plain_errors,
    profile_form_data,
)
from ..models import BenchmarkProfile, ServerConfig
from .base import api, require

PROFILE_NAME_MAX = BenchmarkProfile._meta.get_field("name").max_length or 128


@api.get("/configs")
def list_configs(request: HttpRequest, limit: int = 200, q: str = ""):
    """Newest first; `q` searches names, model paths and hash prefixes (as the Configs page does)."""
    require(request, "experiments.view_serverconfig")
    return [serializers.config_json(c) for c in config_history.search_configs(q[:200])[: min(max(limit, 1), 1000)]]


@api.get("/configs/{config_id}")
def get_config(request: HttpRequest, config_id: int):
    """One config with the config it was derived from, its other versions (and what differs) and its runs."""
    require(request, "experiments.view_serverconfig")
    return config_history.config_history_json(get_object_or_404(ServerConfig, pk=config_id))


@api.post("/configs", response={201: dict, 422: dict})
def create_config(request: HttpRequest, payload: Body[dict[str, Any]]):
    require(request, "experiments.add_serverconfig")
    form = ServerConfigForm(config_form_data(payload))
    if not form.is_valid():
        return Status(422, {"detail": "invalid config", "errors": plain_errors(form)})
    # The very same stored config (same name and content) is reused, not re-owned.
    config = do_create_config(Actor.of(request), form.save_unsaved())
    return Status(201, serializers.config_json(config))


@api.get("/profiles")
def list_profiles(request: HttpRequest, limit: int = 200, q: str = ""):
    require(request, "experiments.view_benchmarkprofile")
    return [serializers.profile_json(p) for p in config_history.search_profiles(q[:200])[: min(max(limit, 1), 1000)]]


@api.post("/profiles", response={201: dict, 422: dict})
def create_profile(request: HttpRequest, payload: Body[dict[str, Any]]):
    require(request, "experiments.add_benchmarkprofile")
    name = str(payload.get("name") or "").strip()
    form = BenchmarkProfileForm(profile_form_data(apply_profile_defaults(payload)))
    name_problem = "This field is required." if not name else None
    if len(name) > PROFILE_NAME_MAX:
        name_problem = f"Ensure this value has at most {PROFILE_NAME_MAX} characters."
    if not form.is_valid() or name_problem:
        errors = plain_errors(form) if form.errors else {}
        if name_problem:
            errors["name"] = [name_problem]
        return Status(422, {"detail": "invalid profile", "errors": errors})
    profile = do_create_profile(Actor.of(request), form.save_unsaved(name=name))
    return Status(201, serializers.profile_json(profile))
