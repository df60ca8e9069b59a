"""The experiments: the list, a new experiment, its comparison page and exports, and a re-run."""

from __future__ import annotations

import re
import shlex
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from ..actions.audit import Actor
from ..actions.experiments import do_create_experiment, do_rerun_experiment
from ..exports import comparison_csv_response, comparison_json_response
from ..forms import (
    BenchmarkProfileForm,
    ExperimentForm,
    ExperimentSubmission,
    RerunForm,
    ServerConfigForm,
    format_env,
)
from ..models import AuditEvent, Experiment, Host, ServerConfig
from ..reports import build_report, comparison_rows_json
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
    experiments = list(Experiment.objects.select_related("host", "created_by", "baseline").prefetch_related("run_set"))
    rows = [(e, e.status_of(list(e.run_set.all()))) for e in experiments]
    return render(request, "experiments/experiment_list.html", {"rows": rows})


@requires("experiments.add_experiment")
def experiment_new(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        source = None
        if (source_id := request.GET.get("from", "")).isdigit():
            source = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=source_id)
        return render(request, "experiments/experiment_new.html", _new_experiment_forms(source))
    submission = _submission_from_post(request.POST)
    if submission.is_valid():
        experiment = do_create_experiment(actor=Actor.of(request), **submission.experiment_fields())
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
        "candidate_next": request.POST.get("candidate_count", len(submission.candidate_forms)),
        "errors": submission.errors,
    }
    return render(request, "experiments/experiment_new.html", context, status=400)


def _submission_from_post(post) -> ExperimentSubmission:
    # Blocks the user removed in the browser leave holes in the numbering: take the blocks that were posted
    # (DATA_UPLOAD_MAX_NUMBER_FIELDS bounds them), so none is dropped and no counter can crash the view.
    numbers = sorted(int(m[1]) for key in post if (m := re.fullmatch(r"cand-(\d+)-name", key)))
    prefixes = [f"cand-{i}" for i in numbers]
    return ExperimentSubmission(post, post, [post] * len(prefixes), post, candidate_prefixes=prefixes)


def _new_experiment_forms(source: Experiment | None = None) -> dict[str, Any]:
    if source is not None:
        return _duplicate_forms(source)
    host = Host.objects.order_by("is_dirty", "name").first()
    target = f"{host.models_root}/kimi-k2.5-sim" if host and host.models_root else ""
    draft = f"{host.models_root}/kimi-k2.5-sim-eagle3" if host and host.models_root else ""
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
        "candidate_next": 1,
        "errors": {},
    }


def _duplicate_forms(source: Experiment) -> dict[str, Any]:
    """The new-experiment forms filled in from `source` ("Duplicate & edit"): its host, configs and profile."""
    candidates = source.ordered_candidates()
    profile = source.profile
    profile_initial = {f: getattr(profile, f) for f in BenchmarkProfileForm.Meta.fields}
    profile_initial["concurrency_text"] = ", ".join(str(c) for c in profile.concurrency)
    return {
        "host_models_urls": _host_models_urls(),
        "experiment_form": ExperimentForm(
            prefix="experiment", initial={"name": f"{source.name} (copy)", "host": source.host.name}
        ),
        "baseline_form": ServerConfigForm(prefix="baseline", initial=_config_initial(source.baseline)),
        "candidate_forms": [
            ServerConfigForm(prefix=f"cand-{i}", initial=_config_initial(config)) for i, config in enumerate(candidates)
        ],
        "profile_form": BenchmarkProfileForm(prefix="profile", initial=profile_initial),
        "candidate_template": ServerConfigForm(prefix="cand-__prefix__", initial={**DEFAULT_CANDIDATE, "name": ""}),
        "candidate_next": len(candidates),
        "errors": {},
    }


def _config_initial(config: ServerConfig) -> dict[str, Any]:
    return {
        **config.launch_spec(),
        "name": config.name,
        "env_text": format_env(config.env),
        "extra_args_text": shlex.join(config.extra_args),
        "expect": config.expect,
        "log_metrics": config.log_metrics,
    }


def _host_models_urls() -> dict[str, str]:
    """Per host name, the API address that lists its models (the page suggests them for the model paths)."""
    return {name: reverse("api:host_models", args=[pk]) for pk, name in Host.objects.values_list("pk", "name")}


@requires("experiments.view_experiment")
def experiment_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    report = build_report(experiment)
    return render(
        request,
        "experiments/experiment_detail.html",
        {
            "experiment": experiment,
            "report": report,
            "comparison": comparison_rows_json(report),
            "configs": [report.baseline, *report.candidates],
            "can_manage": experiment.can_be_managed_by(request.user),
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


@requires("experiments.change_experiment")
@require_POST
def rerun_experiment(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    require_manage(request, experiment)
    form = RerunForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(str(e) for errors in form.errors.values() for e in errors))
    else:
        runs = do_rerun_experiment(experiment, actor=Actor.of(request), launches=form.cleaned_data["launches"])
        messages.success(request, f"Queued {len(runs)} more runs, interleaved, to confirm the result.")
    return redirect(experiment)
