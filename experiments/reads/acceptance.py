"""The series' last accept length before an experiment, per candidate and concurrency: the reference the experiment
JSON's `accept_length` carries (serializers/experiments.py), and what `specdash gate --fail-on accept-drop:2%`
compares."""

from __future__ import annotations

import statistics
from typing import Any

from experiments.reads import series
from experiments.reads.reports import ExperimentReport


def references(report: ExperimentReport, hashes: list[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """One query: every earlier cell of these series; the last run of each (hash, concurrency) stands for it."""
    if not hashes:
        return {}
    experiment = report.experiment
    rows = (
        series.history_cells(experiment.host_id, experiment.profile.series_key, hashes)
        .filter(run__finished_at__lt=experiment.created_at, accept_length__isnull=False)
        .exclude(run__experiment=experiment)
        .order_by("run__finished_at", "run_id")
        .values_list("run__config__content_hash", "concurrency", "run_id", "run__experiment_id", "accept_length")
    )
    last: dict[tuple[str, int], tuple[int, int, list[float]]] = {}
    for config_hash, level, run_id, experiment_id, value in rows:
        key = (config_hash, level)
        if key not in last or last[key][0] != run_id:
            last[key] = (run_id, experiment_id, [])
        if value is not None:
            last[key][2].append(value)
    return {
        key: {"mean": round(statistics.fmean(values), 4), "run": run_id, "experiment": experiment_id}
        for key, (run_id, experiment_id, values) in last.items()
    }
