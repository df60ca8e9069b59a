"""The experiments: the list, a new experiment, its comparison page and exports (its own and other tools'), and a
re-run."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.forms import Form
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from experiments import serializers
from experiments.analysis import acceptance, steady_state
from experiments.analysis.cells import LATENCY_TABLE_HEADINGS
from experiments.analysis.deployment_view import DEFINITIONS as DEPLOYMENT_DEFINITIONS
from experiments.reads import environments
from experiments.reads.config_history import block_sources, config_initial, latest_experiment_using, profile_initial
from experiments.reads.headroom import studies_about
from experiments.reads.listing import STATUSES, ListingQuery, experiments_table
from experiments.reads.queueing import estimates_of, finish_estimate, launch_estimate
from experiments.reads.reports import cached_report
from experiments.reads.schedules import schedule_view, schedules_about
from experiments.serializers.exports import (
    comparison_csv_response,
    comparison_json_response,
    experiment_export_response,
)

from ..actions.audit import Actor
from ..actions.experiments import do_create_experiment, do_rerun_experiment, do_set_cadence
from ..actions.notes import do_set_experiment_notes
from ..actions.quotas import QuotaExceeded
from ..actions.schedules import schedule_refusal
from ..forms import (
    BenchmarkProfileForm,
    CadenceForm,
    ExperimentForm,
    ExperimentNotesForm,
    ExperimentSubmission,
    RerunForm,
    ServerConfigForm,
)
from ..forms.configs import suggested_model_paths
from ..forms.headroom import HeadroomForm
from ..forms.sweeps import SweepForm, SweepPreview
from ..models import AuditEvent, Experiment, Host, Run, ServerConfig
from .access import require_manage, requires

AUDIT_EVENTS_SHOWN = 100
# What a new experiment form starts with; the simulated host's model names are a contract (DESIGN.md).
DEFAULT_CANDIDATE = {
    "name": "eagle3-2step",
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 2,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 3,
}


@requires("experiments.view_experiment")
def experiment_list(request: HttpRequest) -> HttpResponse:
    query = ListingQuery.from_params(request.GET)
    context = {
        "listing": experiments_table(query),
        "query": query,
        "statuses": STATUSES,
        "hosts": Host.objects.order_by("name").values_list("name", flat=True),
        "columns": [
            ("name", "Name"),
            ("owner", "Owner"),
            ("host", "Host"),
            ("speedup", "Best speedup"),
            ("status", "Status"),
            ("duration", "Duration"),
            ("submitted", "Submitted"),
        ],
    }
    return render(request, "experiments/experiment_list.html", context)


@requires("experiments.change_experiment")
@require_POST
def edit_experiment_notes(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    require_manage(request, experiment)
    form = ExperimentNotesForm(request.POST)
    if not form.is_valid():
        messages.error(request, _errors_text(form))
    elif do_set_experiment_notes(experiment, actor=Actor.of(request), **form.cleaned_data):
        messages.success(request, "Notes saved.")
    return redirect(f"{experiment.get_absolute_url()}#notes")


@requires("experiments.add_experiment")
def experiment_new(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return render(request, "experiments/experiment_new.html", _prefilled_forms(request))
    submission = _submission_from_post(request.POST)
    refusal = ""
    if submission.is_valid():
        try:
            experiment = do_create_experiment(actor=Actor.of(request), **submission.experiment_fields())
        except QuotaExceeded as exc:
            # At the top of the page, where it is read first, and beside Launches, the field that makes it fit.
            refusal = str(exc)
            submission.profile_form.add_error("launches", refusal)
        else:
            messages.success(request, f"Experiment “{experiment.name}” submitted.")
            for warning in submission.warnings:
                messages.warning(request, warning)
            return redirect(experiment)
    blank = _new_experiment_forms()
    context = {
        "experiment_form": submission.experiment_form,
        "baseline_form": submission.baseline_form,
        "candidate_forms": submission.candidate_forms,
        "profile_form": submission.profile_form,
        "candidate_template": blank["candidate_template"],
        "host_models_urls": blank["host_models_urls"],
        "sweep_form": blank["sweep_form"],
        "config_sources": {},
        "candidate_next": request.POST.get("candidate_count", len(submission.candidate_forms)),
        "errors": submission.errors,
        "refusal": refusal,
    }
    return render(request, "experiments/experiment_new.html", context, status=400)


def _submission_from_post(post) -> ExperimentSubmission:
    # Blocks the user removed in the browser leave holes in the numbering: take the blocks that were posted
    # (DATA_UPLOAD_MAX_NUMBER_FIELDS bounds them), so none is dropped and no counter can crash the view.
    numbers = sorted(int(m[1]) for key in post if (m := re.fullmatch(r"cand-(\d+)-name", key)))
    prefixes = [f"cand-{i}" for i in numbers]
    return ExperimentSubmission(post, post, [post] * len(prefixes), post, candidate_prefixes=prefixes)


@requires("experiments.add_experiment")
@require_POST
def preview_sweep(request: HttpRequest) -> JsonResponse:
    """The sweep panel's preview, from the page's own form data: the host, the profile, and the candidate block the
    sweep varies (`sweep-base`, the first one on the page). Nothing is saved."""
    post = request.POST
    base = post.get("sweep-base", "")
    base_prefix = base if re.fullmatch(r"cand-\d+", base) and f"{base}-name" in post else None
    sweep = SweepForm(post, prefix="sweep", base_data=post if base_prefix else None, base_prefix=base_prefix)
    preview = SweepPreview(post.get("experiment-host", ""), sweep, BenchmarkProfileForm(post, prefix="profile"))
    if not preview.is_valid():
        return JsonResponse({"detail": "invalid sweep", "errors": preview.errors, **sweep.grid_json()}, status=422)
    return JsonResponse(preview.as_json(launch_estimate(*preview.launch_shape()), with_form_text=True))


def _prefilled_forms(request: HttpRequest) -> dict[str, Any]:
    """The new-experiment forms, blank or filled in by "Duplicate & edit" of an experiment (`?from=`), a run (`?run=`)
    or a stored config (`?config=`). A number that names nothing is a 404; anything else is ignored."""
    params = {key: request.GET.get(key, "") for key in ("from", "run", "config")}
    ids = {key: value for key, value in params.items() if re.fullmatch(r"[0-9]{1,18}", value)}
    if "from" in ids:
        return _duplicate_forms(
            get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=ids["from"])
        )
    if "run" in ids:
        run = get_object_or_404(
            Run.objects.select_related("config", "experiment__host", "experiment__baseline", "experiment__profile"),
            pk=ids["run"],
        )
        return _config_forms(run.config, run.experiment, name=f"{run.experiment.name} · {run.config.name} (copy)")
    if "config" in ids:
        config = get_object_or_404(ServerConfig, pk=ids["config"])
        return _config_forms(config, latest_experiment_using(config), name=f"{config.name} (copy)")
    return _new_experiment_forms()


def _config_forms(config: ServerConfig, experiment: Experiment | None, *, name: str) -> dict[str, Any]:
    """The forms for one stored config: the only candidate, beside the host, baseline and profile of `experiment`
    (the defaults without one); or, the experiment's baseline itself, the baseline measured alone."""
    forms = _new_experiment_forms()
    host = experiment.host.name if experiment else forms["experiment_form"].initial.get("host")
    forms["experiment_form"] = ExperimentForm(prefix="experiment", initial={"name": name, "host": host})
    candidates = [config]
    if experiment is not None:
        forms["baseline_form"] = ServerConfigForm(prefix="baseline", initial=config_initial(experiment.baseline))
        forms["profile_form"] = BenchmarkProfileForm(prefix="profile", initial=profile_initial(experiment.profile))
        if experiment.baseline_id == config.pk:
            candidates = []
    forms["candidate_forms"] = [ServerConfigForm(prefix="cand-0", initial=config_initial(c)) for c in candidates]
    forms["candidate_next"] = len(candidates)
    stored = {"baseline": experiment.baseline} if experiment is not None else {}
    forms["config_sources"] = block_sources({**stored, **({"cand-0": config} if candidates else {})})
    return forms


def _new_experiment_forms() -> dict[str, Any]:
    host = Host.objects.order_by("is_dirty", "name").first()
    target, draft = suggested_model_paths(host.models_root if host else "")
    tp_size = 8 if host and host.gpu_count >= 8 else 1
    baseline = {"name": "baseline", "model_path": target, "tp_size": tp_size}
    candidate = {
        **DEFAULT_CANDIDATE,
        "model_path": target,
        "speculative_draft_model_path": draft,
        "tp_size": tp_size,
    }
    return {
        "host_models_urls": _host_models_urls(),
        "experiment_form": ExperimentForm(prefix="experiment", initial={"host": host.name if host else None}),
        "baseline_form": ServerConfigForm(prefix="baseline", initial=baseline),
        "candidate_forms": [ServerConfigForm(prefix="cand-0", initial=candidate)],
        "profile_form": BenchmarkProfileForm(prefix="profile"),
        "candidate_template": ServerConfigForm(prefix="cand-__prefix__", initial={**candidate, "name": ""}),
        "sweep_form": SweepForm(prefix="sweep"),
        "candidate_next": 1,
        "config_sources": {},
        "errors": {},
    }


def _duplicate_forms(source: Experiment) -> dict[str, Any]:
    """The new-experiment forms filled in from `source` ("Duplicate & edit"): its host, configs and profile."""
    candidates = source.ordered_candidates()
    return {
        "host_models_urls": _host_models_urls(),
        "experiment_form": ExperimentForm(
            prefix="experiment", initial={"name": f"{source.name} (copy)", "host": source.host.name}
        ),
        "baseline_form": ServerConfigForm(prefix="baseline", initial=config_initial(source.baseline)),
        "candidate_forms": [
            ServerConfigForm(prefix=f"cand-{i}", initial=config_initial(config)) for i, config in enumerate(candidates)
        ],
        "profile_form": BenchmarkProfileForm(prefix="profile", initial=profile_initial(source.profile)),
        "candidate_template": ServerConfigForm(prefix="cand-__prefix__", initial={**DEFAULT_CANDIDATE, "name": ""}),
        "sweep_form": SweepForm(prefix="sweep"),
        "candidate_next": len(candidates),
        "config_sources": block_sources(
            {"baseline": source.baseline, **{f"cand-{i}": config for i, config in enumerate(candidates)}}
        ),
        "errors": {},
    }


def _host_models_urls() -> dict[str, str]:
    """Per host name, the API address that lists its models (the page suggests them for the model paths)."""
    return {name: reverse("api:host_models", args=[pk]) for pk, name in Host.objects.values_list("pk", "name")}


@requires("experiments.view_experiment")
def experiment_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    report = cached_report(experiment)
    built_schedules, verified_schedules = schedules_about(experiment)
    queue, estimates = estimates_of(report.runs, experiment.host)
    return render(
        request,
        "experiments/experiment_detail.html",
        {
            "experiment": experiment,
            "report": report,
            "latency_headings": LATENCY_TABLE_HEADINGS,
            "deployment_definitions": DEPLOYMENT_DEFINITIONS,
            "comparison": serializers.comparison_rows_json(report.comparison),
            "steady_cells": steady_state.cells(report.measurement_values),
            "configs": [report.baseline, *report.candidates],
            "queue": queue,
            # Each pending run's start and end, and the last one's: the experiment's (the page words them again as
            # time passes, and as its runs' states come in).
            "estimates": estimates,
            "estimates_json": {pk: estimate.as_json() for pk, estimate in estimates.items()},
            "finish": finish_estimate(estimates.values()),
            "reproducibility": environments.reproducibility_warnings(experiment, report.runs),
            "schedule_form": CadenceForm(
                initial={"every": experiment.schedule, "hour_utc": experiment.schedule_hour}, auto_id="schedule-%s"
            ),
            "can_manage": experiment.can_be_managed_by(request.user),
            "headroom_studies": studies_about(experiment),
            "schedules_built": built_schedules,
            "schedule_refusal": schedule_refusal(experiment.host),
            "acceptance_definitions": acceptance.DEFINITIONS,
            # The schedule's own answer on the page of the experiment that verifies it (the same rows, one reading).
            "schedules_verified": [schedule_view(s, with_figure=False) for s in verified_schedules],
            "headroom_form": HeadroomForm(experiment=experiment, candidates=report.candidates, auto_id="headroom-%s"),
            "notes_form": ExperimentNotesForm(
                initial={"notes": experiment.notes, "tags": experiment.tags}, auto_id="notes-%s"
            ),
            "events": AuditEvent.objects.about_experiment(experiment.pk, [r.pk for r in report.runs]).select_related(
                "actor"
            )[:AUDIT_EVENTS_SHOWN],
        },
    )


@requires("experiments.view_experiment")
def experiment_export_json(request: HttpRequest, experiment_id: int) -> JsonResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    return comparison_json_response(experiment)


@requires("experiments.view_experiment")
def experiment_export_csv(request: HttpRequest, experiment_id: int) -> HttpResponse:
    return comparison_csv_response(get_object_or_404(Experiment, pk=experiment_id))


@requires("experiments.view_experiment")
def experiment_export(request: HttpRequest, experiment_id: int, kind: str) -> HttpResponse:
    """The experiment in a format another tool reads: `kind` is one of serializers.exports.EXPORT_KINDS, each its
    own route (urls.py)."""
    experiments = Experiment.objects.select_related("host", "baseline", "profile", "created_by")
    return experiment_export_response(get_object_or_404(experiments, pk=experiment_id), kind)


@requires("experiments.change_experiment")
@require_POST
def rerun_experiment(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    require_manage(request, experiment)
    form = RerunForm(request.POST)
    if not form.is_valid():
        messages.error(request, _errors_text(form))
    else:
        try:
            runs = do_rerun_experiment(experiment, actor=Actor.of(request), launches=form.cleaned_data["launches"])
        except QuotaExceeded as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Queued {len(runs)} more runs, interleaved, to confirm the result.")
    return redirect(experiment)


@requires("experiments.change_experiment")
@require_POST
def schedule_experiment(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    require_manage(request, experiment)
    form = CadenceForm(request.POST)
    if not form.is_valid():
        messages.error(request, _errors_text(form))
        return redirect(experiment)
    data = form.cleaned_data
    do_set_cadence(experiment, actor=Actor.of(request), every=data["every"], hour=data["hour_utc"])
    if experiment.schedule:
        when = experiment.next_scheduled_at.strftime("%Y-%m-%d %H:%M UTC") if experiment.next_scheduled_at else ""
        messages.success(request, f"Scheduled {experiment.get_schedule_display()}; the next launch is at {when}.")
    else:
        messages.info(request, "No longer scheduled.")
    return redirect(experiment)


def _errors_text(form: Form) -> str:
    """A small form's errors as one message line (its page has no form to show them beside)."""
    return "; ".join(str(error) for errors in form.errors.values() for error in errors)
