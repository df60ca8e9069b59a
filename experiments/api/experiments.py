"""Experiments: submit (inline configs, ids or a sweep), read with comparison and flags, re-run, schedule, export."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Status

from experiments import serializers
from experiments.reads.listing import ListingQuery, experiments_table
from experiments.reads.reports import build_report
from experiments.serializers.exports import (
    comparison_csv_response,
    comparison_json_response,
    experiment_export_response,
)

from ..actions import dispatch
from ..actions.audit import Actor
from ..actions.experiments import do_create_experiment, do_rerun_experiment, do_set_cadence
from ..forms import (
    CadenceForm,
    ExperimentSubmission,
    RerunForm,
    plain_errors,
)
from ..models import Experiment
from ..reads.bakeoff import experiment_bakeoff
from ..reads.draft_report import experiment_draft_report
from ..serializers.bakeoff import bakeoff_json
from ..serializers.draft_report import draft_report_json
from .base import api, config_data, host_name, profile_data, require, require_manage
from .bodies import ExperimentIn, RerunIn, ScheduleIn
from .refusals import documented, refused, responses, status_of
from .sweeps import sweep_form


@api.post("/experiments", response=responses(201, 403, 404, 409, 429), openapi_extra=documented(403, 404, 409, 429))
def create_experiment(request: HttpRequest, payload: ExperimentIn):
    require(request, "experiments.add_experiment")
    submission = ExperimentSubmission(
        {
            "name": payload.name,
            "host": host_name(payload.host),
            "run_candidates_without_baseline": payload.run_candidates_without_baseline,
            "profile_traces": payload.profile_traces,
        },
        config_data(payload.baseline, "baseline"),
        [config_data(c, f"candidates.{i}") for i, c in enumerate(payload.candidates)],
        profile_data(payload.profile),
        sweep=sweep_form(payload.sweep) if payload.sweep is not None else None,
    )
    if not submission.is_valid():
        return refused("invalid experiment", submission.errors, status_of(submission.every_form()))
    experiment = do_create_experiment(actor=Actor.of(request), **submission.experiment_fields())  # 429: base.py
    return Status(201, serializers.queued_experiment_json(experiment, warnings=submission.warnings))


@api.get("/experiments")
def list_experiments(request: HttpRequest):
    """The experiments table as JSON: the page's filters (`q`, `status`, `host`, `owner`, `tag`, `sort`, `page`),
    50 a page, newest first; each with its best comparison row."""
    require(request, "experiments.view_experiment")
    listing = experiments_table(ListingQuery.from_params(request.GET))
    return {
        "count": listing.page.paginator.count,
        "page": listing.page.number,
        "pages": listing.page.paginator.num_pages,
        "experiments": [serializers.experiment_row_json(row) for row in listing.rows],
    }


@api.get("/experiments/{experiment_id}")
def get_experiment(request: HttpRequest, experiment_id: int):
    require(request, "experiments.view_experiment")
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    return serializers.experiment_json(build_report(experiment, with_figures=False))


@api.get("/experiments/{experiment_id}/bakeoff")
def get_experiment_bakeoff(request: HttpRequest, experiment_id: int):
    """Every speculative method of the experiment side by side per concurrency: the rows and winners of its one
    comparison grouped by method and engine, and what each method costs besides time (reads/bakeoff.py)."""
    require(request, "experiments.view_experiment")
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    return bakeoff_json(experiment_bakeoff(experiment))


@api.get("/experiments/{experiment_id}/drafts")
def get_experiment_drafts(request: HttpRequest, experiment_id: int):
    """The draft's report card: per draft checkpoint (each distinct draft path of the speculative candidates) its
    served accept length per concurrency and prompt category (SpecForge's definition), beside its training figure
    where the host's training directories hold it (read live for members and up; `training_note` says why not), the
    comparison's rows of its candidates, the checkpoint to ship (`answer`) and the callouts (reads/draft_report.py)."""
    require(request, "experiments.view_experiment")
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    directories, why = dispatch.read_draft_training(
        experiment.host, may_ask=request.user.has_perm("experiments.add_experiment")
    )
    return draft_report_json(experiment_draft_report(experiment, directories, why))


@api.post("/experiments/{experiment_id}/schedule", response={200: dict, 422: dict})
def schedule_experiment(request: HttpRequest, experiment_id: int, payload: ScheduleIn):
    """`{"every": "nightly" | "weekly" | "", "hour_utc": 0-23}`: launch the experiment again on that schedule."""
    require(request, "experiments.change_experiment")
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    require_manage(request, experiment)
    form = CadenceForm({"every": payload.every or "", "hour_utc": payload.hour_utc})
    if not form.is_valid():
        return refused("invalid schedule", plain_errors(form))
    data = form.cleaned_data
    do_set_cadence(experiment, actor=Actor.of(request), every=data["every"], hour=data["hour_utc"])
    return {"id": experiment.pk, "schedule": serializers.cadence_json(experiment)}


@api.post("/experiments/{experiment_id}/rerun", response=responses(201, 429), openapi_extra=documented(429))
def rerun_experiment(request: HttpRequest, experiment_id: int, payload: RerunIn):
    require(request, "experiments.change_experiment")
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    require_manage(request, experiment)
    form = RerunForm({"launches": payload.launches})
    if not form.is_valid():
        return refused("invalid re-run", plain_errors(form))
    # 429 past a quota (base.py)
    runs = do_rerun_experiment(experiment, actor=Actor.of(request), launches=form.cleaned_data["launches"])
    return Status(
        201, {"id": experiment.pk, "runs": [{"id": r.pk, "config": r.config.name, "state": r.state} for r in runs]}
    )


@api.get("/experiments/{experiment_id}/export.json", url_name="experiment_export_json_api")
def export_experiment_json(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """Every table of the comparison page, as the page's own JSON download."""
    require(request, "experiments.view_experiment")
    experiments = Experiment.objects.select_related("host", "baseline", "profile")
    return comparison_json_response(get_object_or_404(experiments, pk=experiment_id))


@api.get("/experiments/{experiment_id}/export.csv", url_name="experiment_export_csv_api")
def export_experiment_csv(request: HttpRequest, experiment_id: int) -> HttpResponse:
    require(request, "experiments.view_experiment")
    return comparison_csv_response(get_object_or_404(Experiment, pk=experiment_id))


def _export(request: HttpRequest, experiment_id: int, kind: str) -> HttpResponse:
    require(request, "experiments.view_experiment")
    experiments = Experiment.objects.select_related("host", "baseline", "profile", "created_by")
    return experiment_export_response(get_object_or_404(experiments, pk=experiment_id), kind)


@api.get("/experiments/{experiment_id}/export.llm-d.json", url_name="experiment_export_llmd_api")
def export_experiment_llmd(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """A list of llm-d Benchmark Reports (schema 0.2.1), one per measured cell; specdash's speculative figures under
    `results.observability["x-specdash"]` (docs/user-guide.md, "Exports, for specdash and for other tools")."""
    return _export(request, experiment_id, "llm-d.json")


@api.get("/experiments/{experiment_id}/export.bench-serving.jsonl", url_name="experiment_export_bench_serving_api")
def export_experiment_bench_serving(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """SGLang bench_serving result lines, one per measured cell, with `server_info`: `POST /imports` reads them."""
    return _export(request, experiment_id, "bench-serving.jsonl")


@api.get("/experiments/{experiment_id}/export.mlflow.json", url_name="experiment_export_mlflow_api")
def export_experiment_mlflow(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """One MLflow run per config: the bodies of `runs/log-batch`, figures at `step` = concurrency."""
    return _export(request, experiment_id, "mlflow.json")


@api.get("/experiments/{experiment_id}/export.wandb.json", url_name="experiment_export_wandb_api")
def export_experiment_wandb(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """One W&B run per config: its `config`, `summary` (`<figure>/c<concurrency>`) and `history` by concurrency."""
    return _export(request, experiment_id, "wandb.json")
