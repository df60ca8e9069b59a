"""The one JSON shape of each noun: the API answers with these, and the websocket events and the exports use them
too, so a field is added in one place. Secret-looking environment values are masked here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.urls import reverse

from experiments.analysis import acceptance
from experiments.analysis.telemetry import SERVER_METRIC_FIELDS, ServerMetricReading
from experiments.forms import BenchmarkProfileForm
from experiments.models import (
    BenchmarkProfile,
    Experiment,
    Flag,
    Host,
    ProfileTrace,
    PromptSet,
    Run,
    ServerConfig,
    Suspicion,
)
from experiments.reads import environments
from experiments.reads.listing import ExperimentRow
from experiments.reads.queueing import QueuedRun
from experiments.rules import launch_policy


def run_state_json(run: Run) -> dict[str, Any]:
    """What changes while a run lives: its part of `run_json`, which the websocket's state events carry whole."""
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
    }


def run_json(run: Run, *, with_measurements: bool = True, queue: QueuedRun | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        **run_state_json(run),
        "experiment": run.experiment_id,
        "config": run.config.name,
        "config_id": run.config_id,
        "config_hash": run.config.content_hash,
        "launch_index": run.launch_index,
        "log_lines": run.log_lines,
        "effective_args": run.effective_args,
        "cancel_reason": run.cancel_reason,
        # Queued runs only: place on the host, what it waits for, estimated start and duration (seconds).
        "queue": queue.as_json() if queue else None,
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


def queued_experiment_json(experiment: Experiment, **extra: Any) -> dict[str, Any]:
    """What a POST that queues an experiment answers (a submission, a profiled re-run): its id, page and runs."""
    runs = experiment.run_set.select_related("config").order_by("sequence")
    return {
        "id": experiment.pk,
        "url": experiment.get_absolute_url(),
        "runs": [{"id": r.pk, "config": r.config.name, "state": r.state} for r in runs],
        **extra,
    }


def experiment_row_json(row: ExperimentRow) -> dict[str, Any]:
    """An experiment in the table (`GET /api/experiments`, `specdash status`): its best cell, not its comparison."""
    experiment, best = row.experiment, row.best
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "url": experiment.get_absolute_url(),
        "host": experiment.host.name,
        "owner": experiment.created_by.get_username() if experiment.created_by else None,
        "status": row.status,
        "baseline": experiment.baseline.name,
        "candidates": row.candidates,
        "tags": experiment.tag_list,
        "created_at": experiment.created_at.isoformat(),
        "duration_s": row.duration.total_seconds() if row.duration else None,
        # duration_s is the calendar span; a nightly series spans days its runs never took (`Experiment.time_taken`).
        "run_time_s": row.time_taken.run_time.total_seconds() if row.time_taken else None,
        "duration_text": str(row.time_taken) if row.time_taken else None,
        "best": None
        if best is None
        else {
            "candidate": best.candidate,
            "concurrency": best.concurrency,
            "speedup": round(best.speedup, 4),
            "ci_low": None if best.ci_low is None else round(best.ci_low, 4),
            "ci_high": None if best.ci_high is None else round(best.ci_high, 4),
            "verdict": best.verdict,
        },
        "settling": row.settling,
    }


def host_json(h: Host) -> dict[str, Any]:
    return {
        "id": h.pk,
        "name": h.name,
        "address": h.address,
        "port": h.port,
        "username": h.username,
        "key_name": h.key_name,
        "extra_env_prefixes": h.extra_env_prefixes,
        "extra_flags": h.extra_flags,
        "default_env": launch_policy.masked(h.default_env or {}),
        "work_dir": h.work_dir,
        "models_root": h.models_root,
        "launcher": h.launcher,
        "server_port": h.server_port,
        "cost_per_gpu_hour": h.cost_per_gpu_hour,
        # An admin's quotas for members' launches here (null: the SPECDASH_QUOTA_* default), and what applies.
        "quota_launches_queued": h.quota_launches_queued,
        "quota_gpu_hours_per_day": h.quota_gpu_hours_per_day,
        "launch_quota": h.launch_quota,
        "gpu_hours_quota": h.gpu_hours_quota,
        "pinned": h.is_pinned,
        "host_key": h.host_key,
        "gpus": h.gpu_inventory,
        "dirty": h.is_dirty,
        "dirty_reason": h.dirty_reason,
        "active_run": h.active_run_id,
        "models_listed_at": models_listed_at(h),
        # The flags the host's SGLang accepts, as read from its launcher's --help (null: not read with this launcher).
        "server_flags": sorted(known) if (known := h.known_server_flags()) is not None else None,
        "sglang_version": h.listed_sglang_version,
        "server_flags_read_at": h.server_flags_at.isoformat() if known is not None and h.server_flags_at else None,
    }


def models_listed_at(h: Host) -> str | None:
    """When the host's stored model listing was read (None: never, or under another models root)."""
    listed = h.model_inventory_at is not None and (h.model_inventory or {}).get("models_root") == h.models_root
    return h.model_inventory_at.isoformat() if listed and h.model_inventory_at else None


def profile_json(p: BenchmarkProfile) -> dict[str, Any]:
    fields = {f: getattr(p, f) for f in (*BenchmarkProfileForm.Meta.fields, "concurrency", "dataset")}
    fields["prompt_set"] = p.prompt_set_id
    return {"id": p.pk, "name": p.name, "series_key": p.series_key, **fields}


def prompt_set_json(prompt_set: PromptSet) -> dict[str, Any]:
    return {
        "id": prompt_set.pk,
        "name": prompt_set.name,
        "kind": prompt_set.kind,
        "content_hash": prompt_set.content_hash,
        "prompt_count": prompt_set.prompt_count,
        "categories": prompt_set.categories,
    }


def flag_json(flag: Flag) -> dict[str, Any]:
    return {
        "id": flag.pk,
        "config": flag.config.name,
        "concurrency": flag.concurrency,
        "direction": flag.direction,
        "change": round(flag.change, 4),
        "baseline_mean": round(flag.baseline_mean, 3),
        "new_mean": round(flag.new_mean, 3),
        "kind": flag.kind,
        # What its series measure: "throughput" (tok/s; every flag before acceptance was watched) or
        # "acceptance" (accept length, tokens per verify step).
        "metric": flag.metric,
        "triage": flag.triage,
        "message": flag.message,
        "url": flag.get_absolute_url(),
        "changed_after": flag.changed_after.isoformat() if flag.changed_after else None,
        "changed_by": flag.changed_by.isoformat() if flag.changed_by else None,
        "confirmed_by_run": flag.confirmed_by_id,
        "series": [
            {
                "config": s.config.name,
                "config_hash": s.config_hash,
                "concurrency": s.concurrency,
                "category": s.category,  # "" for the whole cell; else a prompt category's acceptance
                "baseline_mean": round(s.baseline_mean, 3),
                "new_mean": round(s.new_mean, 3),
                "change": round(s.change, 4),
                "last_run_before": s.last_before_run_id,
                "first_run_after": s.change_run_id,
                "confirmed_by_run": s.confirmed_by_id,
            }
            for s in flag.series.all()
        ],
        # What changed in the environment between the last run before the change and the first after it.
        "environment_change": environments.diff_before_change(flag.run),
    }


def suspicion_json(suspicion: Suspicion) -> dict[str, Any]:
    return {
        "id": suspicion.pk,
        "state": suspicion.state,
        "run": suspicion.run_id,
        "config_hash": suspicion.config_hash,
        "confirming_runs": [r.pk for r in suspicion.confirming_runs.all() if r.config_id == suspicion.config_id],
        "flag": suspicion.flag_id,
        "series": [
            {
                "concurrency": row.concurrency,
                "metric": row.metric,
                "category": row.category,
                "change": round(row.change, 4),
                "state": row.state,
            }
            for row in suspicion.series.all()
        ],
    }


def schedule_json(experiment: Experiment) -> dict[str, Any] | None:
    if not experiment.schedule:
        return None
    return {
        "every": experiment.schedule,
        "hour_utc": experiment.schedule_hour,
        "next_at": experiment.next_scheduled_at.isoformat() if experiment.next_scheduled_at else None,
    }


def config_json(config: ServerConfig) -> dict[str, Any]:
    """A config as the JSON API shows one (`/api/configs`), plus where it came from and where its page is. Its
    environment's secret-looking values are masked: every reader of the team sees this."""
    spec = config.launch_spec()
    return {
        "id": config.pk,
        "name": config.name,
        "content_hash": config.content_hash,
        "short_hash": config.short_hash,
        **spec,
        "env": launch_policy.masked(spec.get("env") or {}),
        "derived_from": config.derived_from_id,
        "created_at": config.created_at.isoformat(),
        "url": reverse("config_detail", args=[config.pk]),
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
