"""Hosts: list, register (admins), test a connection, list models, mark clean."""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict, WithJsonSchema

from experiments import serializers
from experiments.actions import dispatch
from experiments.rules import draft_export, launch_policy

from ..actions.audit import Actor
from ..actions.hosts import (
    ExportRefused,
    do_export_draft_checkpoint,
    do_mark_host_clean,
    do_register_host,
    do_request_model_listing,
    do_test_host,
)
from ..forms import (
    DraftExportForm,
    HostForm,
    plain_errors,
)
from ..models import Host
from ..models.hosts import RUN_LOG_CAP_MIB_BOUNDS, RUN_TRACE_CAP_MIB_BOUNDS
from .base import api, require
from .bodies import column_length, int_schema
from .refusals import documented, refused, responses, status_of


def _required_text(field: str) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "minLength": 1, "maxLength": column_length(Host, field)})


class HostIn(Schema):
    """A host as an admin registers it: the host form's fields, which check every value (an address in the allowlist,
    a key by name, ...)."""

    # Required, as the schema says, but refused by the form: a user who may not register hosts hears 403 whatever
    # the body holds.
    model_config = ConfigDict(json_schema_extra={"required": ["name", "address", "username"]})

    name: Annotated[str | None, _required_text("name")] = None
    address: Annotated[str | None, _required_text("address")] = None
    username: Annotated[str | None, _required_text("username")] = None
    port: Annotated[int, int_schema(1, 65535)] = 22
    server_port: Annotated[int | None, int_schema(1, 65535)] = None
    work_dir: str | None = None
    models_root: str | None = None
    shell_setup: str | None = None
    launcher: str | None = None
    vllm_launcher: str | None = None
    specforge_launcher: str | None = None  # blank: no draft export on this host
    python: str | None = None
    cost_per_gpu_hour: float | None = None
    quota_launches_queued: int | None = None
    quota_gpu_hours_per_day: float | None = None
    run_log_cap_mib: Annotated[int | None, int_schema(*RUN_LOG_CAP_MIB_BOUNDS, nullable=True)] = None
    run_trace_cap_mib: Annotated[int | None, int_schema(*RUN_TRACE_CAP_MIB_BOUNDS, nullable=True)] = None
    key_name: str | None = None  # a key under SPECDASH_SSH_KEY_DIR, by file name; left out: the SSH agent
    extra_env_prefixes: str | list[str] | None = None
    extra_flags: str | list[str] | None = None
    default_env: str | dict[str, Any] | None = None
    draft_training_dirs: str | list[str] | None = None  # absolute paths under the models root, or one per line


assert set(HostIn.model_fields) >= {*Host.ADMIN_FIELDS}, "a host field unstated"


@api.get("/hosts")
def list_hosts(request: HttpRequest):
    require(request, "experiments.view_host")
    return [serializers.host_json(h) for h in Host.objects.select_related("ssh_key")]


@api.get("/hosts/{host_id}")
def get_host(request: HttpRequest, host_id: int):
    """One host as `GET /api/hosts` lists it: its GPUs, models' listing age and the flags its SGLang accepts."""
    require(request, "experiments.view_host")
    return serializers.host_json(get_object_or_404(Host.objects.select_related("ssh_key"), pk=host_id))


@api.post("/hosts", response=responses(201, 409), openapi_extra=documented(409))
def create_host(request: HttpRequest, payload: HostIn):
    require(request, "experiments.add_host")
    form = HostForm(payload.model_dump(exclude_unset=True))
    if not form.is_valid():
        return refused("invalid host", plain_errors(form), status_of([form]))
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
def host_models(request: HttpRequest, host_id: int, response: HttpResponse):
    """Model directories found on the host under its models root (those holding a config.json), as a worker last
    listed them: the `X-Models-Listed-At` header says when (absent: never). Reading never reaches the host; POST
    .../models/refresh asks for a new listing."""
    require(request, "experiments.view_host")
    host = get_object_or_404(Host, pk=host_id)
    listed_at = serializers.models_listed_at(host)
    if listed_at:
        response["X-Models-Listed-At"] = listed_at
    return host.listed_models()


@api.get("/hosts/{host_id}/draft-checkpoints")
def host_draft_checkpoints(request: HttpRequest, host_id: int):
    """The host's draft training directories (SpecForge's layout) read now through a worker (members and up): per
    directory its runs, each checkpoint's step, `exported` with its `draft_paths` (each usable as a config's draft
    model path), `is_latest`/`is_best`, `metrics` (eval/*), `simulated_acc_len` and `served_definition` (the same + 1:
    the bonus token counted, as a server's accept length is); `refusal` when a directory was not read, `skipped`
    entries and `problems` with their reasons. 502 when the host failed, 504 when no worker answered."""
    require(request, "experiments.add_experiment")
    host = get_object_or_404(Host.objects.select_related("ssh_key"), pk=host_id)
    directories = []
    if host.draft_training_dirs:
        try:
            directories = dispatch.read_draft_checkpoints(host)
        except dispatch.HostProbeFailed as exc:
            raise HttpError(exc.status, str(exc)) from exc
    return {"id": host.pk, "directories": directories}


def _picked_text(max_length: int) -> WithJsonSchema:
    no_controls = launch_policy.CONTROL_CHARS.pattern[1:-1]
    return WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": f"^[^{no_controls}]*$"}
    )


class DraftExportIn(Schema):
    """A checkpoint as `GET /api/hosts/{id}/draft-checkpoints` lists it: its directory's `path`, its run's `run_id`
    and its `step`."""

    directory: Annotated[str, _picked_text(DraftExportForm.base_fields["directory"].max_length or 0)]
    run_id: Annotated[str, _picked_text(DraftExportForm.base_fields["run_id"].max_length or 0)]
    step: Annotated[int, int_schema(0, draft_export.MAX_STEP)]


@api.post("/hosts/{host_id}/draft-checkpoints/export", response=responses(200, 409), openapi_extra=documented(409))
def export_draft_checkpoint(request: HttpRequest, host_id: int, payload: DraftExportIn):
    """Export a listed, not yet exported checkpoint for SGLang with the host's SpecForge launcher, where an admin set
    one (members and up); specdash builds the command from the host's listing, read again now. 200 with the
    `output_dir` (now listed as the checkpoint's draft path), the `exit_status` and the `output`'s tail; 409 when
    refused (no launcher, not listed, exported already, the output exists), 502 when the host or the export failed,
    504 when no worker answered."""
    require(request, "experiments.add_experiment")
    host = get_object_or_404(Host.objects.select_related("ssh_key"), pk=host_id)
    form = DraftExportForm(payload.model_dump())
    if not form.is_valid():
        return refused("invalid checkpoint", plain_errors(form))
    data = form.cleaned_data
    try:
        answer = do_export_draft_checkpoint(host, Actor.of(request), data["directory"], data["run_id"], data["step"])
    except ExportRefused as exc:
        return refused(str(exc), {}, 409)
    except dispatch.HostProbeFailed as exc:
        if exc.status == 409:
            return refused(str(exc), {}, 409)
        raise HttpError(exc.status, str(exc)) from exc
    keys = ("output_dir", "exit_status", "output")
    return Status(200, {"id": host.pk, **{key: answer.get(key) for key in keys}})


@api.post("/hosts/{host_id}/models/refresh", response={202: dict})
def refresh_host_models(request: HttpRequest, host_id: int):
    """Ask a worker to list the host's models again (members and up). 202 at once: the listing is stored when the
    worker is done; `requested` is false when one was asked for moments ago (that one is coming)."""
    require(request, "experiments.add_experiment")
    host = get_object_or_404(Host, pk=host_id)
    requested = do_request_model_listing(host, Actor.of(request))
    return Status(202, {"id": host.pk, "requested": requested, "models_listed_at": serializers.models_listed_at(host)})


@api.post("/hosts/{host_id}/clean")
def clean_host(request: HttpRequest, host_id: int):
    require(request, "experiments.mark_host_clean")
    host = get_object_or_404(Host, pk=host_id)
    do_mark_host_clean(host, Actor.of(request))
    return {"id": host.pk, "dirty": False}
