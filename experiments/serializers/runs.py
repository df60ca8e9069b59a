"""Runs: a run's state (the websocket's state events), a run with its measurements, its row in lists, its
server-metric samples, its profiler traces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.urls import reverse
from django.utils import timezone

from experiments.analysis import acceptance
from experiments.analysis.telemetry import SERVER_METRIC_FIELDS, ServerMetricReading
from experiments.models import (
    ProfileTrace,
    Run,
)
from experiments.reads.queueing import QueuedRun, RunEstimate, run_estimate
from experiments.rules import gpu_hours

# A queued run's standing on its host and a queued or live run's estimate (both None once it has ended).
Standing = tuple[QueuedRun | None, RunEstimate | None]


def run_state_json(run: Run, standing: Standing | None = None) -> dict[str, Any]:
    """What changes while a run lives: its part of `run_json`, which the websocket's state events carry whole.
    `standing`: read with the run's host queue where the caller has it (else read here: no query once it ended)."""
    queue, estimate = standing if standing is not None else run_estimate(run)
    return {
        "id": run.pk,
        "state": run.state,
        "phases": run.phases(),
        "failure": run.failure(),
        "cancel_requested": run.cancel_requested,
        "loading_progress": run.loading_progress,
        "benchmark_cell": run.benchmark_cell,
        # While benchmarking: {concurrency, pass, passes, cell, cells, requests_done, requests, percent, label}.
        "benchmark_progress": run.benchmark_progress(),
        "server_facts": run.server_facts(),  # each model's loading, CUDA graphs, KV pool, retractions
        # What went wrong without failing the run, the server's own warnings with the log line they came from, and
        # the live alarms with their remedies: [{kind, message, at, line?, text?, remedies?}]. In the state events
        # too, so an open run page shows a warning the moment it is raised.
        "warnings": run.warnings,
        # Why the run measures a degenerate benchmark (analysis/degenerate.py), checked as its prompt results were
        # recorded: {reason, findings: [{kind, count, total, sentence}]}; null when healthy or not checked.
        "degenerate": {"reason": run.degenerate_reason, "findings": run.degenerate_findings}
        if run.degenerate_findings
        else None,
        # Queued runs only: place on the host, what it waits for, estimated start and duration (seconds).
        "queue": queue.as_json() if queue else None,
        # Queued and live runs: when it should start (queued) and end, each a range {low, mid, high} in seconds from
        # `computed_at` and as times, what the length rests on ("from 12 runs of this config on this host") and the
        # sentence the pages show; null once it has ended.
        "estimate": estimate.as_json() if estimate else None,
    }


def run_json(run: Run, *, with_measurements: bool = True, standing: Standing | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        **run_state_json(run, standing),
        "experiment": run.experiment_id,
        "config": run.config.name,
        "config_id": run.config_id,
        "config_hash": run.config.content_hash,
        "launch_index": run.launch_index,
        "log_lines": run.log_lines,
        # Bytes of log text stored, and the line where the host's cap cut it (null: not cut; the rest is on the host).
        "log_bytes": run.log_bytes,
        "log_cut_line": run.log_cut_line,
        "effective_args": run.effective_args,
        "cancel_reason": run.cancel_reason,
        "gpu_hours": run_gpu_hours_json(run),
        "url": run.get_absolute_url(),
        "profile_requested": run.profile_requested,
        # Null for a run specdash launched; for one imported from a result file: {file, format, tool, version,
        # command, lines}.
        "imported_from": run.imported_from,
    }
    if with_measurements:
        data["measurements"] = [
            {
                "pass": m.pass_index,
                "concurrency": m.concurrency,
                "completed": m.completed,
                "failed": m.failed,
                "duration_s": m.duration_s,
                "output_throughput": m.output_throughput,
                "total_throughput": m.total_throughput,
                "request_throughput": m.request_throughput,
                "accept_length": m.accept_length,
                "pooled_accept_length": m.pooled_accept_length,
                "mean_request_accept_length": m.mean_request_accept_length,
                "acceptance_disagreement": acceptance.disagreement(m.accept_length, m.pooled_accept_length),
                "server_mean_e2e_latency_ms": m.server_mean_e2e_latency_ms,
                # Over the longest stretch with 80% of the concurrency in flight (analysis/steady_state.py); null
                # where none qualified, the accept length also for a non-speculative config.
                "steady_state_output_throughput": m.steady_state_output_throughput,
                "steady_state_window_s": m.steady_state_window_s,
                "steady_state_accept_length": m.steady_state_accept_length,
                # Per draft position (analysis/acceptance.py): the summed accepted-drafts histogram, the share of
                # verify steps that accepted draft 1, 2, ..., and both per prompt category; null where not reported.
                "accepted_drafts_histogram": m.accepted_drafts_histogram,
                "position_acceptance": m.position_acceptance,
                "position_acceptance_by_category": m.position_acceptance_by_category,
                **{name: getattr(m, name) for name in m.LATENCY_FIELDS},
                # The worker's clock as the cell's client returned (its window ran duration_s before); null before
                # specdash stamped it.
                "ended_at": m.ended_at.isoformat() if m.ended_at else None,
            }
            for m in run.measurement_set.all()
        ]
    return data


def run_gpu_hours_json(run: Run) -> dict[str, Any]:
    """What the run costs the daily GPU-hour quotas: `reserved` when it was queued (its GPUs x the upper end of its
    estimated length; null if queued before reservations), and `charged` now: the reservation while it is pending
    (or the time it has taken, if longer), what it took once it has ended."""
    gpus = run.config.gpu_count
    reserved = None if run.reserved_s is None else gpus * run.reserved_s / 3600
    charged = None
    if run.is_finished or run.reserved_s is not None:
        span = gpu_hours.LaunchSpan(gpus, run.started_at, run.finished_at, run.is_finished, run.reserved_s or 0.0)
        charged = gpu_hours.launch_gpu_hours(span, timezone.now())
    return {
        "gpus": gpus,
        "reserved": None if reserved is None else round(reserved, 4),
        "charged": None if charged is None else round(charged, 4),
        "settled": run.is_finished,
    }


def server_metric_samples_json(
    readings: Sequence[ServerMetricReading], ids: Sequence[int] | None = None
) -> dict[str, Any]:
    """The server's gauges as columns: `t` in seconds since the epoch, then each gauge (null: not served); with
    `ids`, each sample's id beside it (what a live page resumes after)."""
    shape: dict[str, Any] = {
        "fields": ["t", *SERVER_METRIC_FIELDS],
        "samples": [[r.t, *r.stored_fields().values()] for r in readings],
    }
    if ids is not None:
        shape["ids"] = list(ids)
    return shape


def run_row_json(run: Run) -> dict[str, Any]:
    """A run in a list (`GET /api/runs`, what `specdash runs` prints); `run_json` has the rest. The run should come
    with its config and host."""
    return {
        "id": run.pk,
        "experiment": run.experiment_id,
        "config": run.config.name,
        "host": run.host.name,
        "launch_index": run.launch_index,
        "state": run.state,
        "failure_kind": run.failure_kind or None,
        "cancel_requested": run.cancel_requested,
        "log_lines": run.log_lines,
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "url": run.get_absolute_url(),
        "imported": run.imported_from is not None,
    }


def profile_trace_json(trace: ProfileTrace) -> dict[str, Any]:
    """One rank's profiler trace of a run: where it stands and its summary per speculative phase (the bytes are a
    download, `download_url`, for a logged-in page session)."""
    return {
        "id": trace.pk,
        "concurrency": trace.concurrency,
        "rank": trace.rank,
        "file_name": trace.file_name,
        "state": trace.state,
        "message": trace.message,
        "size_bytes": trace.size_bytes,
        "steps": trace.steps,
        "summary": trace.summary,
        "download_url": reverse("profile_trace_download", args=[trace.run_id, trace.pk]) if trace.has_trace else None,
    }
