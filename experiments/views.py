from __future__ import annotations

import csv
import re
from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from .actions.experiments import do_create_experiment
from .actions.runs import do_cancel_run
from .forms import BenchmarkProfileForm, ExperimentForm, ExperimentSubmission, ServerConfigForm
from .models import ApiToken, Experiment, Host, LogChunk, Run
from .reports import build_report, comparison_rows_json, report_json

# What a new experiment form starts with; the simulated host's model names are a contract (DESIGN.md).
DEFAULT_CANDIDATE = {
    "name": "eagle3-2step",
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 2,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 3,
}


@login_required
def experiment_list(request: HttpRequest) -> HttpResponse:
    experiments = list(Experiment.objects.select_related("host", "created_by", "baseline").prefetch_related("run_set"))
    rows = [(e, e.status_of(list(e.run_set.all()))) for e in experiments]
    return render(request, "experiments/experiment_list.html", {"rows": rows})


def _submission_from_post(post) -> ExperimentSubmission:
    # Blocks the user removed in the browser leave holes in the numbering: take the blocks that were posted
    # (DATA_UPLOAD_MAX_NUMBER_FIELDS bounds them), so none is dropped and no counter can crash the view.
    numbers = sorted(int(m[1]) for key in post if (m := re.fullmatch(r"cand-(\d+)-name", key)))
    prefixes = [f"cand-{i}" for i in numbers]
    return ExperimentSubmission(post, post, [post] * len(prefixes), post, candidate_prefixes=prefixes)


def _host_models_urls() -> dict[str, str]:
    """Per host name, the API address that lists its models (the page suggests them for the model paths)."""
    return {name: reverse("api:host_models", args=[pk]) for pk, name in Host.objects.values_list("pk", "name")}


def _new_experiment_forms() -> dict[str, Any]:
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


@login_required
def experiment_new(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return render(request, "experiments/experiment_new.html", _new_experiment_forms())
    submission = _submission_from_post(request.POST)
    if submission.is_valid():
        experiment = do_create_experiment(user=request.user, **submission.experiment_fields())
        messages.success(request, f"Experiment “{experiment.name}” submitted.")
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


@login_required
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
        },
    )


@login_required
def experiment_export_json(request: HttpRequest, experiment_id: int) -> JsonResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    response = JsonResponse(report_json(build_report(experiment, with_figures=False)))
    response["Content-Disposition"] = f'attachment; filename="experiment-{experiment.pk}.json"'
    return response


@login_required
def experiment_export_csv(request: HttpRequest, experiment_id: int) -> HttpResponse:
    return comparison_csv_response(get_object_or_404(Experiment, pk=experiment_id))


def comparison_csv_response(experiment: Experiment) -> HttpResponse:
    rows = comparison_rows_json(build_report(experiment, with_figures=False))
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="experiment-{experiment.pk}-comparison.csv"'
    columns = [
        "candidate",
        "concurrency",
        "baseline_tok_s",
        "candidate_tok_s",
        "speedup",
        "ci_low",
        "ci_high",
        "verdict",
    ]
    writer = csv.DictWriter(response, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return response


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("experiment", "config", "host"), pk=run_id)
    measurements = list(run.measurement_set.all())
    return render(request, "experiments/run_detail.html", {"run": run, "measurements": measurements})


@login_required
def run_log_download(request: HttpRequest, run_id: int) -> StreamingHttpResponse:
    run = get_object_or_404(Run, pk=run_id)

    def lines():
        for text in LogChunk.objects.filter(run=run).order_by("first_line").values_list("text", flat=True).iterator():
            yield text + "\n"

    response = StreamingHttpResponse(lines(), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.log"'
    return response


@login_required
@require_POST
def cancel_run(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    if do_cancel_run(run):
        messages.info(request, f"Cancel requested for run {run.pk}.")
    else:
        messages.warning(request, f"Run {run.pk} has already finished or is being cancelled.")
    return redirect(request.POST.get("next") or run.get_absolute_url())


@login_required
def token_list(request: HttpRequest) -> HttpResponse:
    return render(request, "experiments/token_list.html", {"tokens": _tokens_of(request)})


@login_required
@require_POST
def create_token(request: HttpRequest) -> HttpResponse:
    _, raw = ApiToken.issue(request.user, name=(request.POST.get("name") or "api")[:100])
    return render(request, "experiments/token_list.html", {"tokens": _tokens_of(request), "new_token": raw})


def _tokens_of(request: HttpRequest):
    return ApiToken.objects.filter(user=cast(User, request.user)).order_by("-created_at")
