"""What runs ran on: a run's environment, GPU telemetry and server metrics, and the environment diff of two runs,
two experiments, or a run and the last run before it in its history series (what a regression flag's first run is
compared with)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja.errors import HttpError

from experiments import serializers
from experiments.analysis.telemetry import server_metrics_summary
from experiments.reads import environments

from ..models import Experiment, Run, RunEnvironment
from .base import api, require


def _run(run_id: int) -> Run:
    return get_object_or_404(Run.objects.select_related("config", "host", "experiment__profile"), pk=run_id)


@api.get("/runs/{run_id}/environment")
def get_run_environment(request: HttpRequest, run_id: int):
    """The host fingerprint read before the launch, the environment launched and received by each server process
    (`env` null: unreadable), and the GPU telemetry with its summary while benchmarking."""
    require(request, "experiments.view_run")
    run = _run(run_id)
    environment = RunEnvironment.objects.filter(run=run).first()
    samples, cells, summary = environments.run_telemetry(run)
    return {
        "run": run.pk,
        "environment": environment.as_json() if environment else None,
        "telemetry": {
            "summary": summary,
            "fields": ["t", "gpu", "sm_mhz", "mem_mhz", "temperature_c", "power_w", "utilization_pct", "reasons"],
            "samples": [
                [s.t, s.gpu, s.sm_mhz, s.mem_mhz, s.temperature_c, s.power_w, s.utilization_pct, s.reasons]
                for s in samples
            ],
            "cells": [{"start": start, "end": end, "label": label} for start, end, label in cells],
        },
    }


@api.get("/runs/{run_id}/server-metrics")
def get_run_server_metrics(request: HttpRequest, run_id: int):
    """The server's Prometheus gauges sampled during the benchmark cells (one row per scrape, `t` in seconds since
    the epoch on the clock of the GPU telemetry and the cells; null: not served), with a summary and the cells."""
    require(request, "experiments.view_run")
    run = _run(run_id)
    readings = environments.run_server_metrics(run)
    _, cells, _ = environments.run_telemetry(run)
    return {
        "run": run.pk,
        "summary": server_metrics_summary(readings),
        **serializers.server_metric_samples_json(readings),
        "cells": [{"start": start, "end": end, "label": label} for start, end, label in cells],
    }


@api.get("/runs/{run_id}/diff/{other_id}")
def diff_runs(request: HttpRequest, run_id: int, other_id: int):
    """{before, after, env_source, summary, changes: [{what, kind, before, after, detail, text}]}."""
    require(request, "experiments.view_run")
    return environments.diff_runs(_run(run_id), _run(other_id))


@api.get("/runs/{run_id}/diff-before")
def diff_before(request: HttpRequest, run_id: int) -> dict[str, Any]:
    """The diff from the last succeeded run of this run's series (host, config, profile) before it; 404 if none."""
    require(request, "experiments.view_run")
    diff = environments.diff_before_change(_run(run_id))
    if diff is None:
        raise HttpError(404, "No earlier run of this series to compare with.")
    return diff


@api.get("/experiments/{experiment_id}/diff/{other_id}")
def diff_experiments(request: HttpRequest, experiment_id: int, other_id: int):
    """The diff of the runs that stand for each experiment (its first fingerprinted baseline run)."""
    require(request, "experiments.view_experiment")
    diff = environments.diff_experiments(
        get_object_or_404(Experiment, pk=experiment_id), get_object_or_404(Experiment, pk=other_id)
    )
    if diff is None:
        raise HttpError(404, "One of the experiments has no run to compare.")
    return diff
