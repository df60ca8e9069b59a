"""A run: its page, its whole log as a download, and cancelling it."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from ..actions.audit import Actor
from ..actions.runs import do_cancel_run
from ..models import AuditEvent, LogChunk, Run
from .access import require_manage, requires, safe_next


@requires("experiments.view_run")
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("experiment", "config", "host"), pk=run_id)
    measurements = list(run.measurement_set.all())
    context = {
        "run": run,
        "measurements": measurements,
        "can_manage": run.experiment.can_be_managed_by(request.user),
        "events": AuditEvent.objects.about(run).select_related("actor")[:100],
    }
    return render(request, "experiments/run_detail.html", context)


@requires("experiments.view_run")
def run_log_download(request: HttpRequest, run_id: int) -> StreamingHttpResponse:
    run = get_object_or_404(Run, pk=run_id)

    def lines():
        for text in LogChunk.objects.filter(run=run).order_by("first_line").values_list("text", flat=True).iterator():
            yield text + "\n"

    response = StreamingHttpResponse(lines(), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.log"'
    return response


@requires("experiments.change_experiment")
@require_POST
def cancel_run(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("experiment"), pk=run_id)
    require_manage(request, run.experiment)
    if do_cancel_run(run, Actor.of(request)):
        messages.info(request, f"Cancel requested for run {run.pk}.")
    else:
        messages.warning(request, f"Run {run.pk} has already finished or is being cancelled.")
    return redirect(safe_next(request, run.get_absolute_url()))
