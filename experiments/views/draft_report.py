"""The draft's report card pages of an experiment and a study (`reads.draft_report`): the training directories are
read through a worker for members and up, and the page shows the served figures alone, with the reason, whenever
they cannot be read."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from experiments.actions import dispatch
from experiments.analysis.draft_report import DraftReport
from experiments.charts.draft_report import served_against_step_figure
from experiments.models import Experiment, Study
from experiments.reads.draft_report import experiment_draft_report, study_draft_report

from .access import requires


@requires("experiments.view_experiment")
def experiment_draft_report_page(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    directories, why = dispatch.read_draft_training(
        experiment.host, may_ask=request.user.has_perm("experiments.add_experiment")
    )
    return _render(request, experiment_draft_report(experiment, directories, why), experiment, "experiment")


@requires("experiments.view_experiment")
def study_draft_report_page(request: HttpRequest, study_id: int) -> HttpResponse:
    study = get_object_or_404(Study.objects.select_related("host", "baseline"), pk=study_id)
    directories, why = dispatch.read_draft_training(
        study.host, may_ask=request.user.has_perm("experiments.add_experiment")
    )
    return _render(request, study_draft_report(study, directories, why), study, "study")


def _render(request: HttpRequest, report: DraftReport, subject: Experiment | Study, kind: str) -> HttpResponse:
    context = {"report": report, "subject": subject, "kind": kind, "figure": served_against_step_figure(report)}
    return render(request, "experiments/draft_report.html", context)
