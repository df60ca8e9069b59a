"""The JSON API (DESIGN.md contract). Adapters only: validation lives in forms, changes in actions."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Body, NinjaAPI, Schema, Status
from ninja.errors import HttpError
from ninja.security import HttpBearer, django_auth

from . import worker_calls
from .actions.experiments import do_create_experiment, do_rerun_experiment
from .actions.hosts import do_mark_host_clean
from .actions.runs import do_cancel_run
from .exports import comparison_csv_response
from .forms import (
    BenchmarkProfileForm,
    ExperimentSubmission,
    HostForm,
    RerunForm,
    ServerConfigForm,
    apply_profile_defaults,
    config_form_data,
    plain_errors,
    profile_form_data,
)
from .models import ApiToken, BenchmarkProfile, Experiment, Flag, Host, LogChunk, Run, ServerConfig
from .reports import build_report, comparison_rows_json

LOG_PAGE_MAX = 10_000


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        api_token = ApiToken.objects.matching(token).select_related("user").first()
        if api_token is None or not api_token.user.is_active:
            return None
        api_token.touch()
        request.user = api_token.user
        return api_token.user


api = NinjaAPI(title="specdash API", version="1", auth=[BearerToken(), django_auth], urls_namespace="api")


class ExperimentIn(Schema):
    name: str
    host: str | int
    baseline: dict[str, Any] | int
    candidates: list[dict[str, Any] | int]
    profile: dict[str, Any] | int


def _config_data(value: dict[str, Any] | int, path: str) -> dict[str, Any]:
    if isinstance(value, int):
        config = ServerConfig.objects.filter(pk=value).first()
        if config is None:
            raise HttpError(422, f"{path}: no config with id {value}")
        data = {f: getattr(config, f) for f in ServerConfig.LAUNCH_FIELDS}
        data["name"] = config.name
        return config_form_data(data)
    return config_form_data(value)


def _profile_data(value: dict[str, Any] | int) -> dict[str, Any]:
    if isinstance(value, int):
        profile = BenchmarkProfile.objects.filter(pk=value).first()
        if profile is None:
            raise HttpError(422, f"profile: no profile with id {value}")
        value = {f: getattr(profile, f) for f in (*BenchmarkProfileForm.Meta.fields, "concurrency")}
    return profile_form_data(apply_profile_defaults(value))


def _host_name(value: str | int) -> str:
    if isinstance(value, int):
        host = Host.objects.filter(pk=value).first()
        return host.name if host else str(value)
    return value


def _run_json(run: Run, *, with_measurements: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": run.pk,
        "experiment": run.experiment_id,
        "config": run.config.name,
        "config_id": run.config_id,
        "config_hash": run.config.content_hash,
        "launch_index": run.launch_index,
        "state": run.state,
        "phases": run.phases(),
        "failure": run.failure(),
        "cancel_requested": run.cancel_requested,
        "loading_progress": run.loading_progress,
        "log_lines": run.log_lines,
        "effective_args": run.effective_args,
        "url": run.get_absolute_url(),
    }
    if with_measurements:
        data["measurements"] = [
            {
                "pass": m.pass_index,
                "concurrency": m.concurrency,
                "completed": m.completed,
                "failed": m.failed,
                "duration_s": m.duration_s,
                "output_throughput": m.output_throughput,
                "total_throughput": m.total_throughput,
                "request_throughput": m.request_throughput,
                "accept_length": m.accept_length,
                **{name: getattr(m, name) for name in m.LATENCY_FIELDS},
            }
            for m in run.measurement_set.all()
        ]
    return data


@api.post("/experiments", response={201: dict, 422: dict})
def create_experiment(request: HttpRequest, payload: ExperimentIn):
    submission = ExperimentSubmission(
        {"name": payload.name, "host": _host_name(payload.host)},
        _config_data(payload.baseline, "baseline"),
        [_config_data(c, f"candidates.{i}") for i, c in enumerate(payload.candidates)],
        _profile_data(payload.profile),
    )
    if not submission.is_valid():
        return Status(422, {"detail": "invalid experiment", "errors": submission.errors})
    experiment = do_create_experiment(user=request.user, **submission.experiment_fields())
    runs = experiment.run_set.select_related("config").order_by("sequence")
    return Status(
        201,
        {
            "id": experiment.pk,
            "url": experiment.get_absolute_url(),
            "runs": [{"id": r.pk, "config": r.config.name, "state": r.state} for r in runs],
        },
    )


@api.get("/experiments/{experiment_id}")
def get_experiment(request: HttpRequest, experiment_id: int):
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    report = build_report(experiment, with_figures=False)
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "url": experiment.get_absolute_url(),
        "host": experiment.host.name,
        "status": report.status,
        "baseline": report.baseline.name,
        "candidates": [c.name for c in report.candidates],
        "runs": [_run_json(r, with_measurements=False) for r in report.runs],
        "comparison": comparison_rows_json(report),
        "break_even": report.break_even,
        "flags": [
            _flag_json(flag) for flag in Flag.objects.filter(run__experiment=experiment).select_related("config")
        ],
    }


def _flag_json(flag: Flag) -> dict[str, Any]:
    return {
        "id": flag.pk,
        "config": flag.config.name,
        "concurrency": flag.concurrency,
        "direction": flag.direction,
        "change": round(flag.change, 4),
        "baseline_mean": round(flag.baseline_mean, 3),
        "new_mean": round(flag.new_mean, 3),
        "kind": flag.kind,
        "triage": flag.triage,
        "message": flag.message,
        "url": flag.get_absolute_url(),
    }


class RerunIn(Schema):
    launches: int = 1


@api.post("/experiments/{experiment_id}/rerun", response={201: dict, 422: dict})
def rerun_experiment(request: HttpRequest, experiment_id: int, payload: RerunIn):
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    form = RerunForm({"launches": payload.launches})
    if not form.is_valid():
        return Status(422, {"detail": "invalid re-run", "errors": form.errors})
    runs = do_rerun_experiment(experiment, launches=form.cleaned_data["launches"])
    return Status(
        201, {"id": experiment.pk, "runs": [{"id": r.pk, "config": r.config.name, "state": r.state} for r in runs]}
    )


@api.get("/experiments/{experiment_id}/export.csv", url_name="experiment_export_csv_api")
def export_experiment_csv(request: HttpRequest, experiment_id: int) -> HttpResponse:
    return comparison_csv_response(get_object_or_404(Experiment, pk=experiment_id))


@api.get("/runs/{run_id}")
def get_run(request: HttpRequest, run_id: int):
    run = get_object_or_404(Run.objects.select_related("config").prefetch_related("measurement_set"), pk=run_id)
    return _run_json(run)


@api.get("/runs/{run_id}/log")
def get_run_log(request: HttpRequest, run_id: int, after: int = 0, limit: int = 1000, q: str = ""):
    """Lines after line `after`; with `q`, only the lines containing it (case-insensitive), same paging."""
    if after < 0 or limit < 1:
        raise HttpError(422, "after must be >= 0 and limit >= 1")
    limit = min(limit, LOG_PAGE_MAX)
    run = get_object_or_404(Run, pk=run_id)
    lines = LogChunk.objects.lines(run.pk, after=after, limit=limit, containing=q or None)
    last = lines[-1]["n"] if lines else after
    return {"lines": lines, "next": last, "total": run.log_lines, "finished": run.is_finished}


@api.post("/runs/{run_id}/cancel")
def cancel_run(request: HttpRequest, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    accepted = do_cancel_run(run)
    run.refresh_from_db()
    return {"id": run.pk, "state": run.state, "cancel_requested": run.cancel_requested, "accepted": accepted}


def _host_json(h: Host) -> dict[str, Any]:
    return {
        "id": h.pk,
        "name": h.name,
        "address": h.address,
        "port": h.port,
        "username": h.username,
        "key_name": h.key_name,
        "work_dir": h.work_dir,
        "models_root": h.models_root,
        "launcher": h.launcher,
        "server_port": h.server_port,
        "pinned": h.is_pinned,
        "host_key": h.host_key,
        "gpus": h.gpu_inventory,
        "dirty": h.is_dirty,
        "dirty_reason": h.dirty_reason,
        "active_run": h.active_run_id,
    }


@api.get("/hosts")
def list_hosts(request: HttpRequest):
    return [_host_json(h) for h in Host.objects.all()]


@api.post("/hosts", response={201: dict, 422: dict})
def create_host(request: HttpRequest, payload: Body[dict[str, Any]]):
    form = HostForm(payload)
    if not form.is_valid():
        return Status(422, {"detail": "invalid host", "errors": form.errors})
    return Status(201, _host_json(form.save()))


@api.post("/hosts/{host_id}/test")
def test_host(request: HttpRequest, host_id: int):
    """Connect, pin the host key on first contact (verify it after), read the GPU inventory."""
    host = get_object_or_404(Host, pk=host_id)
    try:
        worker_calls.test_host_connection(host)
    except worker_calls.HostProbeFailed as exc:
        raise HttpError(exc.status, str(exc)) from exc
    return _host_json(host)


@api.get("/hosts/{host_id}/models")
def host_models(request: HttpRequest, host_id: int):
    """Model directories found on the host under its models root (those holding a config.json)."""
    host = get_object_or_404(Host, pk=host_id)
    try:
        return worker_calls.host_models(host)
    except worker_calls.HostProbeFailed as exc:
        raise HttpError(exc.status, str(exc)) from exc


def _config_json(c: ServerConfig) -> dict[str, Any]:
    return {"id": c.pk, "name": c.name, "content_hash": c.content_hash, **c.launch_spec()}


@api.get("/configs")
def list_configs(request: HttpRequest, limit: int = 200):
    return [_config_json(c) for c in ServerConfig.objects.order_by("-created_at")[: min(max(limit, 1), 1000)]]


@api.post("/configs", response={201: dict, 422: dict})
def create_config(request: HttpRequest, payload: Body[dict[str, Any]]):
    form = ServerConfigForm(config_form_data(payload))
    if not form.is_valid():
        return Status(422, {"detail": "invalid config", "errors": plain_errors(form)})
    config = form.save_unsaved()
    config.created_by = _api_user(request)
    config.save()
    return Status(201, _config_json(config))


def _profile_json(p: BenchmarkProfile) -> dict[str, Any]:
    fields = {f: getattr(p, f) for f in (*BenchmarkProfileForm.Meta.fields, "concurrency", "dataset")}
    return {"id": p.pk, "name": p.name, "series_key": p.series_key, **fields}


@api.get("/profiles")
def list_profiles(request: HttpRequest, limit: int = 200):
    return [_profile_json(p) for p in BenchmarkProfile.objects.order_by("-created_at")[: min(max(limit, 1), 1000)]]


@api.post("/profiles", response={201: dict, 422: dict})
def create_profile(request: HttpRequest, payload: Body[dict[str, Any]]):
    name = str(payload.get("name") or "").strip()
    form = BenchmarkProfileForm(profile_form_data(apply_profile_defaults(payload)))
    if not form.is_valid() or not name:
        errors = plain_errors(form) if form.errors else {}
        if not name:
            errors["name"] = ["This field is required."]
        return Status(422, {"detail": "invalid profile", "errors": errors})
    profile = form.save_unsaved(name=name)
    profile.created_by = _api_user(request)
    profile.save()
    return Status(201, _profile_json(profile))


def _api_user(request: HttpRequest):
    """The authenticated user (every endpoint requires auth; the type checker cannot know that)."""
    assert request.user.is_authenticated
    return request.user


@api.post("/hosts/{host_id}/clean")
def clean_host(request: HttpRequest, host_id: int):
    host = get_object_or_404(Host, pk=host_id)
    do_mark_host_clean(host)
    return {"id": host.pk, "dirty": False}
