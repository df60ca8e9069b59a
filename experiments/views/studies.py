"""Auto-tuning studies: a study's page (live over its websocket group) and cancelling it."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from ..actions.audit import Actor
from ..actions.studies import do_cancel_study
from ..models import Study
from ..study_report import study_json
from .access import requires


@requires("experiments.view_experiment")
def study_detail(request: HttpRequest, study_id: int) -> HttpResponse:
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    context = {"study": study, "report": study_json(study), "can_manage": study.can_be_managed_by(request.user)}
    return render(request, "experiments/study_detail.html", context)


@require_POST
@requires("experiments.view_experiment")
def cancel_study(request: HttpRequest, study_id: int) -> HttpResponse:
    study = get_object_or_404(Study, pk=study_id)
    if not study.can_be_managed_by(request.user):
        return HttpResponse("Only the study's owner or a maintainer may cancel it.", status=403)
    if do_cancel_study(study, Actor.of(request)):
        messages.success(request, "Study cancelled: its queued runs are cancelled, a live one is torn down.")
    return redirect(study)
