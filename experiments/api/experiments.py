"""Experiments: submit (inline configs, ids or a sweep), read with comparison and flags, re-run, schedule, export."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Body, Schema, Status

from experiments.reads import environments, prompt_reports
from experiments.reads.queueing import queued_runs_of
from experiments.reads.reports import build_report, comparison_rows_json
from experiments.views.exports import comparison_csv_response

from ..actions.audit import Actor
from ..actions.experiments import do_create_experiment, do_rerun_experiment, do_set_schedule
from ..forms import (
    ExperimentSubmission,
    RerunForm,
    ScheduleForm,
)
from ..models import Experiment, Flag, FlagSeries, Suspicion
from .base import api, config_data, host_name, profile_data, require, require_manage
from .runs import run_json
from .sweeps import sweep_form


class ExperimentIn(Schema):
    name: str
    host: str | int
    baseline: dict[str, Any] | int
    candidates: list[dict[str, Any] | int] = []  # none: the baseline measured alone
    profile: dict[str, Any] | int
    run_candidates_without_baseline: bool = False
    # Value lists whose grid of candidates joins `candidates` (see "Sweeps" below).
    sweep: dict[str, Any] | None = None


@api.post("/experiments", response={201: dict, 422: dict})
def create_experiment(request: HttpRequest, payload: ExperimentIn):
    require(request, "experiments.add_experiment")
    submission = ExperimentSubmission(
        {
            "name": payload.name,
            "host": host_name(payload.host),
            "run_candidates_without_baseline": payload.run_candidates_without_baseline,
        },
        config_data(payload.baseline, "baseline"),
        [config_data(c, f"candidates.{i}") for i, c in enumerate(payload.candidates)],
        profile_data(payload.profile),
        sweep=sweep_form(payload.sweep) if payload.sweep is not None else None,
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
    require(request, "experiments.view_experiment")
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    report = build_report(experiment, with_figures=False)
    queue = queued_runs_of(report)
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "url": experiment.get_absolute_url(),
        "host": experiment.host.name,
        "status": report.status,
        "baseline": report.baseline.name,
        "candidates": [c.name for c in report.candidates],
        "runs": [run_json(r, with_measurements=False, queue=queue.get(r.pk)) for r in report.runs],
        "run_candidates_without_baseline": experiment.run_candidates_without_baseline,
        "schedule": _schedule_json(experiment),
        "comparison": comparison_rows_json(report),
        "break_even": report.break_even,
        "never_pays": report.never_pays,
        "equivalence": prompt_reports.equivalence_json(report.equivalence),
        "categories": report.categories,
        "flags": [_flag_json(flag) for flag in _flags_of(experiment)],
        "suspicions": [_suspicion_json(s) for s in _suspicions_of(experiment)],
        # Throttled runs, runs at other clocks, runs on a changed machine (the runs' own warnings are in `runs`).
        "reproducibility": _notes_json(environments.experiment_notes(experiment, report.runs)),
    }


def _notes_json(notes: dict[str, Any]) -> dict[str, Any]:
    return {
        "telemetry_warnings": notes["telemetry"],
        "machine_differences": [
            {"run": row["run"].pk, "against": row["against"].pk, "text": row["text"]} for row in notes["machine"]
        ],
    }


def _flags_of(experiment: Experiment):
    """The flags whose change shows in this experiment's runs, also those led by another experiment's series."""
    here = Q(run__experiment=experiment) | Q(series__change_run__experiment=experiment)
    return (
        Flag.objects.filter(here)
        .distinct()
        # The run and what its environment diff reads (its config's hash, its profile's series).
        .select_related("config", "run__config", "run__experiment__profile")
        .prefetch_related(Prefetch("series", FlagSeries.objects.select_related("config")))
    )


def _suspicions_of(experiment: Experiment):
    return Suspicion.objects.filter(experiment=experiment).prefetch_related("series", "confirming_runs")


def _schedule_json(experiment: Experiment) -> dict[str, Any] | None:
    if not experiment.schedule:
        return None
    return {
        "every": experiment.schedule,
        "hour_utc": experiment.schedule_hour,
        "next_at": experiment.next_scheduled_at.isoformat() if experiment.next_scheduled_at else None,
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
        "changed_after": flag.changed_after.isoformat() if flag.changed_after else None,
        "changed_by": flag.changed_by.isoformat() if flag.changed_by else None,
        "confirmed_by_run": flag.confirmed_by_id,
        "series": [
            {
                "config": s.config.name,
                "config_hash": s.config_hash,
                "concurrency": s.concurrency,
                "baseline_mean": round(s.baseline_mean, 3),
                "new_mean": round(s.new_mean, 3),
                "change": round(s.change, 4),
                "last_run_before": s.last_before_run_id,
                "first_run_after": s.change_run_id,
                "confirmed_by_run": s.confirmed_by_id,
            }
            for s in flag.series.all()
        ],
        # What changed in the environment between the last run before the change and the first after it.
        "environment_change": environments.diff_before_change(flag.run),
    }


def _suspicion_json(suspicion: Suspicion) -> dict[str, Any]:
    return {
        "id": suspicion.pk,
        "state": suspicion.state,
        "run": suspicion.run_id,
        "config_hash": suspicion.config_hash,
        "confirming_runs": [r.pk for r in suspicion.confirming_runs.all() if r.config_id == suspicion.config_id],
        "flag": suspicion.flag_id,
        "series": [
            {"concurrency": row.concurrency, "change": round(row.change, 4), "state": row.state}
            for row in suspicion.series.all()
        ],
    }


class RerunIn(Schema):
    launches: int = 1


@api.post("/experiments/{experiment_id}/schedule", response={200: dict, 422: dict})
def schedule_experiment(request: HttpRequest, experiment_id: int, payload: Body[dict[str, Any]]):
    """`{"every": "nightly" | "weekly" | "", "hour_utc": 0-23}`: launch the experiment again on that schedule."""
    require(request, "experiments.change_experiment")
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    require_manage(request, experiment)
    form = ScheduleForm({"every": payload.get("every") or "", "hour_utc": payload.get("hour_utc", 2)})
    if not form.is_valid():
        return Status(422, {"detail": "invalid schedule", "errors": form.errors})
    data = form.cleaned_data
    do_set_schedule(experiment, actor=Actor.of(request), every=data["every"], hour=data["hour_utc"])
    return {"id": experiment.pk, "schedule": _schedule_json(experiment)}


@api.post("/experiments/{experiment_id}/rerun", response={201: dict, 422: dict})
def rerun_experiment(request: HttpRequest, experiment_id: int, payload: RerunIn):
    require(request, "experiments.change_experiment")
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    require_manage(request, experiment)
    form = RerunForm({"launches": payload.launches})
    if not form.is_valid():
        return Status(422, {"detail": "invalid re-run", "errors": form.errors})
    runs = do_rerun_experiment(experiment, actor=Actor.of(request), launches=form.cleaned_data["launches"])
    return Status(
        201, {"id": experiment.pk, "runs": [{"id": r.pk, "config": r.config.name, "state": r.state} for r in runs]}
    )


@api.get("/experiments/{experiment_id}/export.csv", url_name="experiment_export_csv_api")
def export_experiment_csv(request: HttpRequest, experiment_id: int) -> HttpResponse:
    require(request, "experiments.view_experiment")
    return comparison_csv_response(get_object_or_404(Experiment, pk=experiment_id))
