"""Accept length per candidate and concurrency, with the series' last value before the experiment: what the
experiment JSON's `accept_length` carries, and what `specdash gate --fail-on accept-drop:2%` compares."""

from __future__ import annotations

import statistics
from typing import Any

from experiments.reads import series
from experiments.reads.reports import ExperimentReport


def accept_length_json(report: ExperimentReport) -> dict[str, list[dict[str, Any]]]:
    """Per speculative candidate measured: `[{concurrency, mean, low, high, reference}]`, where `reference` is
    `{mean, run, experiment}` of the last succeeded run of the same series (host, config hash, profile, concurrency)
    that finished before this experiment was created, or None (the first of its series)."""
    by_name = {c.name: c.content_hash for c in report.candidates}
    references = _references(report, [by_name[name] for name in report.accept_length_series if name in by_name])
    return {
        name: [
            {
                "concurrency": level,
                "mean": round(mean, 4),
                "low": None if low is None else round(low, 4),
                "high": None if high is None else round(high, 4),
                "reference": references.get((by_name.get(name, ""), level)),
            }
            for level, mean, low, high in points
        ]
        for name, points in report.accept_length_series.items()
    }


def _references(report: ExperimentReport, hashes: list[str]) -> dict[tuple[str, int], dict[str, Any]]:
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
