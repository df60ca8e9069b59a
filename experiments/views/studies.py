"""Auto-tuning studies: a study's page (live over its websocket group) and cancelling it."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from ..actions.audit import Actor
from ..actions.review import do_pin_baseline
from ..actions.studies import do_cancel_study, do_confirm_recommendation, recommended_config
from ..models import Study
from ..study_report import figures, study_json
from .access import requires


@requires("experiments.view_experiment")
def study_detail(request: HttpRequest, study_id: int) -> HttpResponse:
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    report = study_json(study)
    context = {
        "study": study,
        "report": report,
        "figures": [(level, f"space-figure-{level}", figure) for level, figure in figures(report)],
        "can_manage": study.can_be_managed_by(request.user),
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
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    if band >= len(study.recommendation):
        return HttpResponse("No such recommendation.", status=404)
    experiment = do_confirm_recommendation(study, band, actor=Actor.of(request))
    messages.success(request, "Confirming experiment queued.")
    return redirect(experiment)


@require_POST
@requires("experiments.add_pinnedbaseline")
def pin_recommendation(request: HttpRequest, study_id: int, band: int) -> HttpResponse:
    """One click: pin a recommendation as the team's baseline on the host for the study's profile."""
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    if band >= len(study.recommendation):
        return HttpResponse("No such recommendation.", status=404)
    config = recommended_config(study, band)
    do_pin_baseline(host=study.host, profile=study.profile, config=config, actor=Actor.of(request))
    messages.success(request, f"{config.name} is now the pinned baseline on {study.host.name} for this profile.")
    return redirect(study)
