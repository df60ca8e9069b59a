"""Acceptance headroom studies: start one from an experiment, and its page (what a better draft would be worth)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from experiments.reads.headroom import headroom_view, study_for

from ..actions.audit import Actor
from ..actions.headroom import do_start_headroom
from ..actions.quotas import QuotaExceeded
from ..forms.headroom import HeadroomForm
from ..models import Experiment
from .access import requires


@requires("experiments.view_experiment")
def headroom_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """The study whose experiment this is (or the latest one started from it)."""
    study = study_for(experiment_id)
    if study is None:
        raise Http404("No headroom study of this experiment.")
    return render(request, "experiments/headroom_detail.html", {"view": headroom_view(study), "study": study})


@require_POST
@requires("experiments.add_experiment")
def start_headroom(request: HttpRequest, experiment_id: int) -> HttpResponse:
    source = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    form = HeadroomForm(request.POST, experiment=source)
    if not form.is_valid():
        problems = [str(e) for errors in form.errors.values() for e in errors]
        messages.error(request, "No headroom study started: " + " ".join(problems))
        return redirect(source)
    try:
        study = do_start_headroom(source, actor=Actor.of(request), **form.cleaned_data)
    except QuotaExceeded as exc:
        messages.error(request, str(exc))
        return redirect(source)
    messages.success(request, f"Headroom study queued: {len(study.accept_lengths)} simulated accept lengths.")
    return redirect(study)
