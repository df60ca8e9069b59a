"""A run: its page, its whole log as a download, and cancelling it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from ..actions.runs import do_cancel_run
from ..models import LogChunk, Run


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
