"""A run: its page, its whole log as a download, and cancelling it."""

from __future__ import annotations

import time
from collections.abc import Iterator

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from experiments.charts.telemetry import server_metrics_figure, telemetry_figure
from experiments.reads import environments, profile_traces
from experiments.reads.queueing import run_estimate

from ..actions import dispatch
from ..actions.audit import Actor
from ..actions.notes import do_set_run_notes
from ..actions.profile_traces import do_profile_run
from ..actions.quotas import QuotaExceeded
from ..actions.runs import do_cancel_run, do_rerun_with_remedy
from ..analysis.telemetry import describe as describe_throttling
from ..analysis.telemetry import server_metrics_summary
from ..forms import RunNotesForm
from ..forms.hosted_configs import stored_config_form
from ..forms.remedies import remedied_config
from ..forms.values import plain_errors
from ..models import AuditEvent, LogChunk, ProfileTrace, Run, RunEnvironment
from ..remedies import RemedyRefused
from .access import require_manage, requires, safe_next


@requires("experiments.view_run")
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(
        Run.objects.select_related("experiment__profile", "config__derived_from", "config__remedy_for_run", "host"),
        pk=run_id,
    )
    measurements = list(run.measurement_set.all())
    samples, cells, telemetry_summary = environments.run_telemetry(run)
    # In the order stored, so the newest id drawn is known: the live page resumes after it (`?metrics_after=`).
    metric_ids, server_readings = environments.server_metrics_after(run.pk, after=0)
    server_readings.sort(key=lambda reading: reading.t)
    standing, estimate = run_estimate(run)  # a queued run's place on its host; its or a live run's start and end
    context = {
        "environment": RunEnvironment.objects.filter(run=run).first(),
        "diff_before": environments.diff_before_change(run) if run.is_finished else None,
        "telemetry_figure": telemetry_figure(samples, cells) if samples else None,
        "telemetry": telemetry_summary,
        "throttle_warning": describe_throttling(f"Run {run.pk}", telemetry_summary),
        # While the run may still benchmark, an empty chart too: the samples streamed mid-cell extend it.
        "server_metrics_figure": server_metrics_figure(
            server_readings, cells, speculative=bool(run.config.speculative_algorithm)
        )
        if server_readings or not run.is_finished
        else None,
        "server_metrics": server_metrics_summary(server_readings),
        "server_metrics_after": metric_ids[-1] if metric_ids else 0,
        "run": run,
        "measurements": measurements,
        "can_manage": run.experiment.can_be_managed_by(request.user),
        "can_clean_host": request.user.has_perm("experiments.mark_host_clean"),
        "events": AuditEvent.objects.about(run).select_related("actor")[:100],
        "facts": run.server_facts(),
        "remedies": run.remedy_rows(),
        # The runs of the versions made from this run's failure, each linking back to it.
        "remedy_runs": Run.objects.filter(config__remedy_for_run=run).select_related("config").order_by("sequence"),
        "standing": standing,
        "estimate": estimate,
        "notes_form": RunNotesForm(initial={"notes": run.notes}, auto_id="notes-%s"),
        "profile_traces": (traces := profile_traces.traces_of(run)),
        "profile_diffs": profile_traces.diffs_within_experiment(run) if traces else [],
        "can_profile": run.is_finished and request.user.has_perm("experiments.add_experiment"),
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


# A download of a run's log from its host ends at these bounds, with a last line saying so: each slice holds a worker
# for a moment, and the web process for the whole download.
HOST_LOG_MAX_BYTES = 4 * 1024 * 1024 * 1024
HOST_LOG_MAX_SECONDS = 1800
HOST_LOG_SLOT_SECONDS = 120  # a user's download slot outlives its last slice by this long


@requires("experiments.view_run")
def run_host_log_download(request: HttpRequest, run_id: int) -> HttpResponseBase:
    """The whole log of a run whose stored log its host's cap cut, as the host holds it: read through a worker (the
    web holds no SSH keys) a slice at a time, from the path the run recorded, bounded in bytes and time."""
    run = get_object_or_404(Run.objects.select_related("host"), pk=run_id)
    if run.log_cut_line is None or not run.log_path:
        return redirect("run_log_download", run.pk)  # the stored log is the whole log
    slot = dispatch.DownloadSlot(int(request.user.pk or 0), HOST_LOG_SLOT_SECONDS)
    if not slot.taken:
        text = "A download of a host's log is already running for you: wait for it to end, then try again.\n"
        return HttpResponse(text, status=429, content_type="text/plain; charset=utf-8")
    try:
        first, size = dispatch.read_run_log(run, 0)
    except dispatch.HostProbeFailed as exc:
        slot.release()
        text = f"The log could not be read from {run.host.name}: {exc}\n"
        return HttpResponse(text, status=exc.status, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(_host_log(run, first, size, slot), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-host.log"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _host_log(run: Run, first: bytes, size: int, slot: dispatch.DownloadSlot) -> Iterator[bytes]:
    """The file up to its size when the download began (a live flood's log grows on), within the bounds; the user's
    download slot is given back at the end, or when the browser goes away (the response closes this generator)."""
    try:
        for data in _host_log_slices(run, first, size):
            slot.renew()
            yield data
    finally:
        slot.release()


def _host_log_slices(run: Run, first: bytes, size: int) -> Iterator[bytes]:
    end, deadline = min(size, HOST_LOG_MAX_BYTES), time.monotonic() + HOST_LOG_MAX_SECONDS
    data, offset = first, 0
    while data:
        data = data[: end - offset]
        yield data
        offset += len(data)
        if offset >= end:
            break
        if time.monotonic() > deadline:
            yield f"\n[specdash] download stopped at byte {offset:,} after {HOST_LOG_MAX_SECONDS} s\n".encode()
            return
        try:
            data, _ = dispatch.read_run_log(run, offset)
        except dispatch.HostProbeFailed as exc:
            yield f"\n[specdash] download stopped at byte {offset:,}: {exc}\n".encode()
            return
    if end < size:
        yield f"\n[specdash] download stopped at {HOST_LOG_MAX_BYTES:,} bytes of {size:,}\n".encode()


@requires("experiments.view_run")
def profile_trace_download(request: HttpRequest, run_id: int, trace_id: int) -> HttpResponse:
    """The stored trace as the server wrote it, to the user's own browser only (open it in Perfetto from disk)."""
    trace = get_object_or_404(ProfileTrace, pk=trace_id, run_id=run_id, state=ProfileTrace.State.STORED)
    response = HttpResponse(bytes(trace.trace or b""), content_type="application/gzip")
    response["Content-Disposition"] = f'attachment; filename="run-{run_id}-{trace.file_name or "trace.json.gz"}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@requires("experiments.add_experiment")
@require_POST
def profile_run(request: HttpRequest, run_id: int) -> HttpResponse:
    """Profile this run: a profiled launch of its config, queued as an experiment of its own."""
    run = get_object_or_404(Run.objects.select_related("experiment__profile", "config", "host"), pk=run_id)
    if not run.is_finished:
        messages.error(request, f"Run {run.pk} has not finished.")
        return redirect(run)
    # Its config launches again: only if it still may on this host (an imported one never passed the form).
    config = stored_config_form(run.config, run.host)
    if not config.is_valid():
        refusals = " ".join(m for ms in plain_errors(config).values() for m in ms)
        messages.error(request, f"{run.config.name} may not be launched on {run.host.name}: {refusals}")
        return redirect(run)
    try:
        experiment = do_profile_run(run, actor=Actor.of(request))
    except QuotaExceeded as exc:
        messages.error(request, str(exc))
        return redirect(run)
    messages.success(request, f"Queued a profiled launch of {run.config.name}.")
    return redirect(experiment)


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


@requires("experiments.change_experiment")
@require_POST
def rerun_with_remedy(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("experiment", "config"), pk=run_id)
    require_manage(request, run.experiment)
    try:
        remedy, version = remedied_config(run, request.POST.get("remedy", ""))
        config, runs = do_rerun_with_remedy(run, remedy, version, Actor.of(request))
    except RemedyRefused as exc:
        messages.error(request, " ".join([str(exc), *(m for ms in exc.errors.values() for m in ms)]))
        return redirect(run)
    except QuotaExceeded as exc:
        messages.error(request, str(exc))
        return redirect(run)
    messages.success(
        request,
        f"Queued {len(runs)} runs: {config.name}, a new version of {run.config.name}, and what it is compared with.",
    )
    return redirect(run.experiment)


@requires("experiments.change_experiment")
@require_POST
def edit_run_notes(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("experiment"), pk=run_id)
    require_manage(request, run.experiment)
    form = RunNotesForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(str(e) for errors in form.errors.values() for e in errors))
    elif do_set_run_notes(run, actor=Actor.of(request), notes=form.cleaned_data["notes"]):
        messages.success(request, "Notes saved.")
    return redirect(f"{run.get_absolute_url()}#notes")
