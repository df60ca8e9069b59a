"""The JSON API (DESIGN.md contract). Adapters only: validation lives in forms, changes in actions."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Body, NinjaAPI, Schema, Status
from ninja.errors import HttpError
from ninja.security import HttpBearer, django_auth

from . import worker_calls
from .actions.audit import Actor
from .actions.experiments import do_create_experiment, do_rerun_experiment
from .actions.hosts import do_mark_host_clean, do_register_host, do_test_host
from .actions.runs import do_cancel_run
from .exports import comparison_csv_response
from .forms import (
    CONTROL_CHARS,
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
LOG_QUERY_MAX = 500
PROFILE_NAME_MAX = BenchmarkProfile._meta.get_field("name").max_length or 128


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


api = NinjaAPI(title="specdash API", version="1", auth=[BearerToken(), django_auth], urls_namespace="api")


class ExperimentIn(Schema):
    name: str
    host: str | int
    baseline: dict[str, Any] | int
    candidates: list[dict[str, Any] | int]
    profile: dict[str, Any] | int


def _require(request: HttpRequest, perm: str) -> None:
    """403 unless the user's role grants `perm` (see roles.py)."""
    if not request.user.has_perm(perm):
        raise HttpError(403, f"Your role does not allow this (it needs {perm}).")


def _require_manage(request: HttpRequest, experiment: Experiment) -> None:
    if not experiment.can_be_managed_by(request.user):
        raise HttpError(403, "Only the experiment's owner or a maintainer may do this.")


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
    _require(request, "experiments.add_experiment")
    submission = ExperimentSubmission(
        {"name": payload.name, "host": _host_name(payload.host)},
        _config_data(payload.baseline, "baseline"),
        [_config_data(c, f"candidates.{i}") for i, c in enumerate(payload.candidates)],
        _profile_data(payload.profile),
    )
    if not submission.is_valid():
        return Status(422, {"detail": "invalid experiment", "errors": submission.errors})
    experiment = do_create_experiment(actor=Actor.of(request), **submission.experiment_fields())
    runs = experiment.run_set.select_related("config").order_by("sequence")
    return Status(
        201,
        {
            "id": experiment.pk,
            "url": experiment.get_absolute_url(),
            "runs": [{"id": r.pk, "config": r.config.name, "state": r.state} for r in runs],
            "warnings": submission.warnings,
        },
    )


@api.get("/experiments/{experiment_id}")
def get_experiment(request: HttpRequest, experiment_id: int):
    _require(request, "experiments.view_experiment")
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
    _require(request, "experiments.change_experiment")
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    _require_manage(request, experiment)
    form = RerunForm({"launches": payload.launches})
    if not form.is_valid():
        return Status(422, {"detail": "invalid re-run", "errors": form.errors})
    runs = do_rerun_experiment(experiment, actor=Actor.of(request), launches=form.cleaned_data["launches"])
    return Status(
        201, {"id": experiment.pk, "runs": [{"id": r.pk, "config": r.config.name, "state": r.state} for r in runs]}
    )


@api.get("/experiments/{experiment_id}/export.csv", url_name="experiment_export_csv_api")
def export_experiment_csv(request: HttpRequest, experiment_id: int) -> HttpResponse:
    _require(request, "experiments.view_experiment")
    return comparison_csv_response(get_object_or_404(Experiment, pk=experiment_id))


@api.get("/runs/{run_id}")
def get_run(request: HttpRequest, run_id: int):
    _require(request, "experiments.view_run")
    run = get_object_or_404(Run.objects.select_related("config").prefetch_related("measurement_set"), pk=run_id)
    return _run_json(run)


@api.get("/runs/{run_id}/log", response={200: dict, 422: dict})
def get_run_log(request: HttpRequest, run_id: int, after: int = 0, limit: int = 1000, q: str = ""):
    """Lines after line `after`; with `q`, only the lines containing it (case-insensitive), same paging."""
    _require(request, "experiments.view_run")
    errors = {}
    if after < 0:
        errors["after"] = ["Must be 0 or more."]
    if limit < 1:
        errors["limit"] = ["Must be 1 or more."]
    if len(q) > LOG_QUERY_MAX or CONTROL_CHARS.search(q):
        errors["q"] = [f"At most {LOG_QUERY_MAX} characters, without control characters."]
    if errors:
        return Status(422, {"detail": "invalid log query", "errors": errors})
    limit = min(limit, LOG_PAGE_MAX)
    run = get_object_or_404(Run, pk=run_id)
    lines = LogChunk.objects.lines(run.pk, after=after, limit=limit, containing=q or None)
    last = lines[-1]["n"] if lines else after
    return {"lines": lines, "next": last, "total": run.log_lines, "finished": run.is_finished}


@api.post("/runs/{run_id}/cancel")
def cancel_run(request: HttpRequest, run_id: int):
    _require(request, "experiments.change_experiment")
    run = get_object_or_404(Run.objects.select_related("experiment"), pk=run_id)
    _require_manage(request, run.experiment)
    accepted = do_cancel_run(run, Actor.of(request))
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
        "extra_env_prefixes": h.extra_env_prefixes,
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
    _require(request, "experiments.view_host")
    return [_host_json(h) for h in Host.objects.select_related("ssh_key")]


@api.post("/hosts", response={201: dict, 422: dict})
def create_host(request: HttpRequest, payload: Body[dict[str, Any]]):
    _require(request, "experiments.add_host")
    form = HostForm(payload)
    if not form.is_valid():
        return Status(422, {"detail": "invalid host", "errors": plain_errors(form)})
    return Status(201, _host_json(do_register_host(form.save_unsaved(), Actor.of(request))))


@api.post("/hosts/{host_id}/test")
def test_host(request: HttpRequest, host_id: int):
    """Connect, pin the host key on first contact (verify it after), read the GPU inventory."""
    _require(request, "experiments.change_host")
    host = get_object_or_404(Host.objects.select_related("ssh_key"), pk=host_id)
    try:
        do_test_host(host, Actor.of(request))
    except worker_calls.HostProbeFailed as exc:
        raise HttpError(exc.status, str(exc)) from exc
    return _host_json(host)


@api.get("/hosts/{host_id}/models")
def host_models(request: HttpRequest, host_id: int):
    """Model directories found on the host under its models root (those holding a config.json)."""
    _require(request, "experiments.view_host")
    host = get_object_or_404(Host, pk=host_id)
    try:
        return worker_calls.host_models(host)
    except worker_calls.HostProbeFailed as exc:
        if request.user.has_perm("experiments.change_host"):
            raise HttpError(exc.status, str(exc)) from exc
        # Only admins learn why: the reason would tell others which addresses and ports answer (a port scan).
        raise HttpError(
            exc.status, "The host's models could not be listed; ask an admin to test its connection."
        ) from None


def _config_json(c: ServerConfig) -> dict[str, Any]:
    return {"id": c.pk, "name": c.name, "content_hash": c.content_hash, **c.launch_spec()}


@api.get("/configs")
def list_configs(request: HttpRequest, limit: int = 200):
    _require(request, "experiments.view_serverconfig")
    return [_config_json(c) for c in ServerConfig.objects.order_by("-created_at")[: min(max(limit, 1), 1000)]]


@api.post("/configs", response={201: dict, 422: dict})
def create_config(request: HttpRequest, payload: Body[dict[str, Any]]):
    _require(request, "experiments.add_serverconfig")
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
    _require(request, "experiments.view_benchmarkprofile")
    return [_profile_json(p) for p in BenchmarkProfile.objects.order_by("-created_at")[: min(max(limit, 1), 1000)]]


@api.post("/profiles", response={201: dict, 422: dict})
def create_profile(request: HttpRequest, payload: Body[dict[str, Any]]):
    _require(request, "experiments.add_benchmarkprofile")
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
    _require(request, "experiments.mark_host_clean")
    host = get_object_or_404(Host, pk=host_id)
    do_mark_host_clean(host, Actor.of(request))
    return {"id": host.pk, "dirty": False}
