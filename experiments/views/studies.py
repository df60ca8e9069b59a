"""Auto-tuning studies: a study's page (live over its websocket group) and cancelling it."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from experiments.reads.study_report import figures, frontier_figure
from experiments.rules import launch_fields
from experiments.serializers import study_json

from ..actions.audit import Actor
from ..actions.quotas import QuotaExceeded
from ..actions.review import do_pin_baseline
from ..actions.schedules import schedule_refusal
from ..actions.studies import do_cancel_study, do_confirm_recommendation, do_start_study, recommended_config
from ..forms import BenchmarkProfileForm, ExperimentForm, ServerConfigForm
from ..forms.configs import suggested_model_paths
from ..forms.studies import StudyForm, StudySubmission
from ..forms.sweeps import SweepForm
from ..models import Host, Study
from .access import requires


@requires("experiments.view_experiment")
def study_detail(request: HttpRequest, study_id: int) -> HttpResponse:
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    report = study_json(study)
    context = {
        "study": study,
        "report": report,
        "figures": [(level, f"space-figure-{level}", figure) for level, figure in figures(report)],
        "frontier": frontier_figure(study),
        "can_manage": study.can_be_managed_by(request.user),
        "schedules": list(study.schedules.only("id", "version", "study_id").order_by("version")),
        "schedule_refusal": schedule_refusal(study.host),
    }
    # The live page re-reads its sections when the study changes (`study_detail.js`).
    template = (
        "experiments/study_detail_live.html" if request.GET.get("part") == "live" else "experiments/study_detail.html"
    )
    return render(request, template, context)


@require_POST
@requires("experiments.view_experiment")
def cancel_study(request: HttpRequest, study_id: int) -> HttpResponse:
    study = get_object_or_404(Study, pk=study_id)
    if not study.can_be_managed_by(request.user):
        return HttpResponse("Only the study's owner or a maintainer may cancel it.", status=403)
    if do_cancel_study(study, Actor.of(request)):
        messages.success(request, "Study cancelled: its queued runs are cancelled, a live one is torn down.")
    return redirect(study)


@require_POST
@requires("experiments.add_experiment")
def confirm_recommendation(request: HttpRequest, study_id: int, band: int) -> HttpResponse:
    """One click: a confirming experiment of a recommendation against the study's baseline."""
    study = _study_with_band(study_id, band)
    try:
        experiment = do_confirm_recommendation(study, band, actor=Actor.of(request))
    except QuotaExceeded as exc:
        messages.error(request, f"No confirming experiment queued: {exc}")
        return redirect(study)
    messages.success(request, "Confirming experiment queued.")
    return redirect(experiment)


def _study_with_band(study_id: int, band: int) -> Study:
    """The study, if it has a `band`-th recommendation (404 otherwise)."""
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    if band >= len(study.recommendation):
        raise Http404("No such recommendation.")
    return study


@require_POST
@requires("experiments.add_pinnedbaseline")
def pin_recommendation(request: HttpRequest, study_id: int, band: int) -> HttpResponse:
    """One click: pin a recommendation as the team's baseline on the host for the study's profile."""
    study = _study_with_band(study_id, band)
    config = recommended_config(study, band)
    do_pin_baseline(host=study.host, profile=study.profile, config=config, actor=Actor.of(request))
    messages.success(request, f"{config.name} is now the pinned baseline on {study.host.name} for this profile.")
    return redirect(study)


@requires("experiments.add_experiment")
def study_new(request: HttpRequest) -> HttpResponse:
    """Start a study: the host and baseline as for an experiment, the candidate a space varies with its value lists,
    the profile's concurrency levels, the budget and the precision wanted."""
    if request.method != "POST":
        # ?engine=vllm: the example is a vLLM candidate and its lists (num_speculative_tokens alone).
        engine = request.GET.get("engine") or launch_fields.SGLANG
        engine = engine if engine in launch_fields.ENGINE_NAMES else launch_fields.SGLANG
        return render(request, "experiments/study_new.html", _blank_forms(engine))
    post = request.POST
    sweep = SweepForm(post, prefix="sweep", base_data=post, base_prefix="base")
    submission = StudySubmission(post, post, post, post, sweep=sweep, prefixed=True)
    refusal = ""
    if submission.is_valid():
        try:
            study = do_start_study(actor=Actor.of(request), **submission.study_fields())
        except QuotaExceeded as exc:
            # At the top of the page, and at the budget: the field a member can change to fit (or an admin raises
            # the limit).
            refusal = str(exc)
            submission.study_form.add_error("max_launches", refusal)
            submission.errors["max_launches"] = [refusal]
        else:
            messages.success(request, f"Study “{study.name}” started: its first round is queued.")
            return redirect(study)
    context = {
        "experiment_form": submission.experiment_form,
        "baseline_form": submission.baseline_form,
        "base_form": sweep.base_form,
        "sweep_form": sweep,
        "profile_form": submission.profile_form,
        "study_form": submission.study_form,
        "errors": submission.errors,
        "refusal": refusal,
    }
    return render(request, "experiments/study_new.html", context, status=400)


def _blank_forms(engine: str) -> dict[str, Any]:
    """The page's forms filled with an example: an EAGLE-3 candidate of `engine` and its sweep's example lists."""
    host = Host.objects.order_by("is_dirty", "name").first()
    tp_size = 8 if host and host.gpu_count >= 8 else 1
    target, draft = suggested_model_paths(host.models_root if host else "")
    sweep = SweepForm(prefix="sweep")
    sweep.initial = sweep.example_lists(engine)
    method = launch_fields.field(engine, "speculative_algorithm")
    eagle3 = next((m for m in method.choices if m.lower() == "eagle3"), "") if method else ""
    base = {
        "name": "space",
        "engine": engine,
        "model_path": target,
        "speculative_algorithm": eagle3,
        "speculative_draft_model_path": draft,
        "tp_size": tp_size,
    }
    return {
        "experiment_form": ExperimentForm(prefix="experiment", initial={"host": host.name if host else None}),
        "baseline_form": ServerConfigForm(prefix="baseline", initial={"name": "baseline", "model_path": target,
                                                                      "tp_size": tp_size}),
        "base_form": ServerConfigForm(prefix="base", initial=base),
        "sweep_form": sweep,
        "profile_form": BenchmarkProfileForm(prefix="profile"),
        "study_form": StudyForm(prefix="study", initial={"max_launches": 40}),
        "errors": {},
    }  # fmt: skip


STUDIES_SHOWN = 200


@requires("experiments.view_experiment")
def study_list(request: HttpRequest) -> HttpResponse:
    studies = (
        Study.objects.select_related("host", "created_by")
        .annotate(rounds=Count("studyround"))
        .order_by("-created_at", "-id")[:STUDIES_SHOWN]
    )
    return render(request, "experiments/study_list.html", {"studies": studies})
