"""The bake-off pages: every speculative method of an experiment or a study side by side (`reads.bakeoff`)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from experiments.models import Experiment, Study
from experiments.reads.bakeoff import experiment_bakeoff, study_bakeoff

from .access import requires


@requires("experiments.view_experiment")
def experiment_bakeoff_page(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    return render(
        request,
        "experiments/bakeoff.html",
        {"bakeoff": experiment_bakeoff(experiment), "subject": experiment, "kind": "experiment"},
    )


@requires("experiments.view_experiment")
def study_bakeoff_page(request: HttpRequest, study_id: int) -> HttpResponse:
    study = get_object_or_404(Study.objects.select_related("host", "baseline"), pk=study_id)
    return render(
        request, "experiments/bakeoff.html", {"bakeoff": study_bakeoff(study), "subject": study, "kind": "study"}
    )
