"""The environment diffs: any two runs, or any two experiments, in words and change by change."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from experiments.reads import environments

from ..models import Experiment, Run
from .access import requires


def _other_id(request: HttpRequest) -> int:
    text = request.GET.get("with", "").strip().lstrip("#")
    if not text.isdigit():
        raise Http404("Say which one to compare with: ?with=<id>.")
    return int(text)


@requires("experiments.view_run")
def run_diff(request: HttpRequest, run_id: int) -> HttpResponse:
    runs = Run.objects.select_related("config", "host", "experiment", "environment")
    before = get_object_or_404(runs, pk=run_id)
    after = get_object_or_404(runs, pk=_other_id(request))
    context = {"diff": environments.diff_runs(before, after), "before": before, "after": after, "kind": "run"}
    return render(request, "experiments/environment_diff.html", context)


@requires("experiments.view_experiment")
def experiment_diff(request: HttpRequest, experiment_id: int) -> HttpResponse:
    before = get_object_or_404(Experiment, pk=experiment_id)
    after = get_object_or_404(Experiment, pk=_other_id(request))
    diff = environments.diff_experiments(before, after)
    if diff is None:
        raise Http404("One of the experiments has no run to compare.")
    runs = Run.objects.select_related("config", "experiment")
    context = {
        "diff": diff,
        "before": runs.get(pk=diff["before"]),
        "after": runs.get(pk=diff["after"]),
        "before_experiment": before,
        "after_experiment": after,
        "kind": "experiment",
    }
    return render(request, "experiments/environment_diff.html", context)
