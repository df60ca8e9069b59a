"""Runs: state and measurements, the stored log, cancel, and re-running a failed run with a remedy."""

from __future__ import annotations

from typing import Annotated

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Status
from pydantic import WithJsonSchema

from experiments import serializers
from experiments.reads import profile_traces
from experiments.reads.runs import MAX_RUNS, run_rows

from ..actions.audit import Actor
from ..actions.profile_traces import do_profile_run
from ..actions.runs import do_cancel_run, do_rerun_with_remedy
from ..forms import (
    CONTROL_CHARS,
    plain_errors,
)
from ..forms.hosted_configs import stored_config_form
from ..forms.remedies import remedied_config
from ..models import LogChunk, Run
from ..remedies import RemedyRefused
from .base import TEXT_WITHOUT_CONTROLS, api, require, require_manage
from .bodies import RemedyIn
from .refusals import documented, refused, responses

LOG_PAGE_MAX = 10_000
LOG_QUERY_MAX = 500


# What the schema says of the queries, so that a request it calls valid is one the checks below take (the checks
# stay the handlers', with their field errors).
State = Annotated[str, WithJsonSchema({"type": "string", "enum": ["", "active", *Run.State.values]})]
HostName = Annotated[str, WithJsonSchema({"type": "string", "maxLength": 100, "pattern": TEXT_WITHOUT_CONTROLS})]
RunLimit = Annotated[int, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_RUNS})]
LogAfter = Annotated[int, WithJsonSchema({"type": "integer", "minimum": 0})]
LogLimit = Annotated[int, WithJsonSchema({"type": "integer", "minimum": 1})]
LogQuery = Annotated[
    str, WithJsonSchema({"type": "string", "maxLength": LOG_QUERY_MAX, "pattern": TEXT_WITHOUT_CONTROLS})
]


@api.get("/runs", response={200: list, 422: dict})
def list_runs(
    request: HttpRequest,
    experiment: int | None = None,
    state: State = "",
    host: HostName = "",
    limit: RunLimit = 50,
):
    """Runs newest first: of one `experiment`, in one `state` (or `active`: not ended), on one `host`; at most
    `limit` (up to 200)."""
    require(request, "experiments.view_run")
    if state and state != "active" and state not in Run.State.values:
        return Status(
            422,
            {"detail": "invalid run query", "errors": {"state": [f"One of active, {', '.join(Run.State.values)}."]}},
        )
    if len(host) > 100 or CONTROL_CHARS.search(host):
        return Status(422, {"detail": "invalid run query", "errors": {"host": ["A host's name."]}})
    if not 1 <= limit <= MAX_RUNS:
        return Status(422, {"detail": "invalid run query", "errors": {"limit": [f"From 1 to {MAX_RUNS}."]}})
    rows = run_rows(experiment=experiment, state=state, host=host, limit=limit)
    return [serializers.run_row_json(run) for run in rows]


@api.get("/runs/{run_id}")
def get_run(request: HttpRequest, run_id: int):
    require(request, "experiments.view_run")
    runs = Run.objects.select_related("config", "host", "experiment__profile").prefetch_related("measurement_set")
    run = get_object_or_404(runs, pk=run_id)
    data = serializers.run_json(run)
    # Per rank and concurrency, with summaries per speculative phase; and against the experiment's other profiled runs.
    data["profile_traces"] = [serializers.profile_trace_json(t) for t in profile_traces.traces_of(run)]
    data["profile_diffs"] = profile_traces.diffs_within_experiment(run) if data["profile_traces"] else []
    if data["failure"] is not None:
        data["failure"]["remedies"] = run.remedy_rows()  # see the remedies section at the end
    return data


@api.get("/runs/{run_id}/log", response={200: dict, 422: dict})
def get_run_log(
    request: HttpRequest,
    run_id: int,
    after: LogAfter = 0,
    limit: LogLimit = 1000,
    q: LogQuery = "",
):
    """Lines after line `after`; with `q`, only the lines containing it (case-insensitive), same paging."""
    require(request, "experiments.view_run")
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
    require(request, "experiments.change_experiment")
    run = get_object_or_404(Run.objects.select_related("experiment"), pk=run_id)
    require_manage(request, run.experiment)
    accepted = do_cancel_run(run, Actor.of(request))
    run.refresh_from_db()
    return {"id": run.pk, "state": run.state, "cancel_requested": run.cancel_requested, "accepted": accepted}


@api.post("/runs/{run_id}/remedy", response=responses(201, 404, 409, 429), openapi_extra=documented(404, 409, 429))
def rerun_with_remedy(request: HttpRequest, run_id: int, payload: RemedyIn):
    """Re-run the failed run's config with one of its remedies: a new config version linked to the failure, queued in
    the experiment with what it is compared with. 201 {config, runs}; 422 when the remedy cannot be applied."""
    require(request, "experiments.change_experiment")
    run = get_object_or_404(Run.objects.select_related("experiment", "config"), pk=run_id)
    require_manage(request, run.experiment)
    try:
        remedy, version = remedied_config(run, payload.remedy)
        config, runs = do_rerun_with_remedy(run, remedy, version, Actor.of(request))  # 429 past a quota (base.py)
    except RemedyRefused as exc:
        # Refused by the config form: its fields' errors; else the remedy itself is the field at fault.
        status = {"not_found": 404}.get(exc.kind, 409)
        return refused(str(exc), exc.errors or {"remedy": [str(exc)]}, status)
    return Status(
        201,
        {
            "config": {
                **serializers.config_json(config),
                "remedy_for_run": config.remedy_for_run_id,
            },
            "runs": [
                {"id": r.pk, "config": r.config.name, "state": r.state, "url": r.get_absolute_url()} for r in runs
            ],
        },
    )


@api.post("/runs/{run_id}/profile", response=responses(201, 409, 429), openapi_extra=documented(409, 429))
def profile_run(request: HttpRequest, run_id: int):
    """Queue a profiled launch of a finished run's config (same host and benchmark profile), as an experiment of its
    own: 201 {id, url, runs}; its runs' profile_traces fill in once they finish."""
    require(request, "experiments.add_experiment")
    run = get_object_or_404(Run.objects.select_related("experiment__profile", "config", "host"), pk=run_id)
    if not run.is_finished:
        return refused("the run has not finished", {"run": ["Profile a finished run."]}, 409)
    # Its config launches again: only if it still may on this host (an imported one never passed the form).
    config = stored_config_form(run.config, run.host)
    if not config.is_valid():
        why = f"config {run.config.name[:80]!r} may not be launched on {run.host.name}"
        return refused(why, plain_errors(config, "config."), 409)
    experiment = do_profile_run(run, actor=Actor.of(request))  # 429 past a quota (base.py)
    return Status(201, serializers.queued_experiment_json(experiment))


@api.get("/runs/{run_id}/profile-diff")
def profile_diff(request: HttpRequest, run_id: int, against: int):
    """How this run's profiled decode step differs from run `against`'s: {phases, lead, lead_family, text}, or
    {"diff": null} unless both were profiled at a shared concurrency and batch size."""
    require(request, "experiments.view_run")
    run = get_object_or_404(Run, pk=run_id)
    other = get_object_or_404(Run, pk=against)
    return {"diff": profile_traces.run_diff(other, run)}
