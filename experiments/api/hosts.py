"""Hosts: list, register (admins), test a connection, list models, mark clean."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Body, Status
from ninja.errors import HttpError

from experiments.actions import dispatch
from experiments.api import serializers

from ..actions.audit import Actor
from ..actions.hosts import do_mark_host_clean, do_register_host, do_test_host
from ..forms import (
    HostForm,
    plain_errors,
)
from ..models import Host
from .base import api, require


@api.get("/hosts")
def list_hosts(request: HttpRequest):
    require(request, "experiments.view_host")
    return [serializers.host_json(h) for h in Host.objects.select_related("ssh_key")]


@api.post("/hosts", response={201: dict, 422: dict})
def create_host(request: HttpRequest, payload: Body[dict[str, Any]]):
    require(request, "experiments.add_host")
    form = HostForm(payload)
    if not form.is_valid():
        return Status(422, {"detail": "invalid host", "errors": plain_errors(form)})
    return Status(201, serializers.host_json(do_register_host(form.save_unsaved(), Actor.of(request))))


@api.post("/hosts/{host_id}/test")
def test_host(request: HttpRequest, host_id: int):
    """Connect, pin the host key on first contact (verify it after), read the GPU inventory."""
    require(request, "experiments.change_host")
    host = get_object_or_404(Host.objects.select_related("ssh_key"), pk=host_id)
    try:
        do_test_host(host, Actor.of(request))
    except dispatch.HostProbeFailed as exc:
        raise HttpError(exc.status, str(exc)) from exc
    return serializers.host_json(host)


@api.get("/hosts/{host_id}/models")
def host_models(request: HttpRequest, host_id: int):
    """Model directories found on the host under its models root (those holding a config.json)."""
    require(request, "experiments.view_host")
    host = get_object_or_404(Host, pk=host_id)
    try:
        return dispatch.host_models(host)
    except dispatch.HostProbeFailed as exc:
        if request.user.has_perm("experiments.change_host"):
            raise HttpError(exc.status, str(exc)) from exc
        # Only admins learn why: the reason would tell others which addresses and ports answer (a port scan).
        raise HttpError(
            exc.status, "The host's models could not be listed; ask an admin to test its connection."
        ) from None


@api.post("/hosts/{host_id}/clean")
def clean_host(request: HttpRequest, host_id: int):
    require(request, "experiments.mark_host_clean")
    host = get_object_or_404(Host, pk=host_id)
    do_mark_host_clean(host, Actor.of(request))
    return {"id": host.pk, "dirty": False}
