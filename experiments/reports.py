"""The comparison of an experiment, read from the database in a constant number of queries.

Pages and the API both show this; the statistics are in `analysis.py` and the figures in `charts.py`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from . import analysis, charts
from .models import Experiment, Measurement, Run, ServerConfig


@dataclass
class ExperimentReport:
    experiment: Experiment
    runs: list[Run]
    baseline: ServerConfig
    candidates: list[ServerConfig]
    rows: list[analysis.ComparisonRow]
    break_even: dict[str, int | None]
    throughput_series: dict[str, list[tuple[int, float, float | None, float | None]]]
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return self.experiment.status_of(self.runs)

    @property
    def has_results(self) -> bool:
        return bool(self.rows)


def build_report(experiment: Experiment, *, with_figures: bool = True) -> ExperimentReport:
    runs = list(Run.objects.filter(experiment=experiment).select_related("config").order_by("sequence"))
    candidates = experiment.ordered_candidates()
    baseline = experiment.baseline
    # A pass with no output (all requests failed) says nothing about speed; analysis refuses zero throughput.
    measurements = Measurement.objects.filter(
        run__experiment=experiment, run__state=Run.State.SUCCEEDED, output_throughput__gt=0
    ).values("run__config__name", "concurrency", "run__launch_index", "pass_index", "output_throughput")
    samples = [
        analysis.Sample(
            config=m["run__config__name"],
            concurrency=m["concurrency"],
            launch=m["run__launch_index"],
            pass_index=m["pass_index"],
            output_throughput=m["output_throughput"],
        )
        for m in measurements
    ]
    rows = analysis.compare(samples, baseline=baseline.name, candidates=[c.name for c in candidates])
    measured = {row.candidate for row in rows}
    break_even = {c.name: analysis.break_even_concurrency(rows, c.name) for c in candidates if c.name in measured}
    series = _throughput_series(samples, [baseline.name] + [c.name for c in candidates])
    report = ExperimentReport(
        experiment=experiment,
        runs=runs,
        baseline=baseline,
        candidates=candidates,
        rows=rows,
        break_even=break_even,
        throughput_series=series,
    )
    if with_figures and rows:
        report.figures = {
            "throughput": charts.throughput_figure(series, baseline=baseline.name),
            "speedup": charts.speedup_figure(rows),
        }
    return report


def _throughput_series(
    samples: list[analysis.Sample], config_names: list[str]
) -> dict[str, list[tuple[int, float, float | None, float | None]]]:
    """Mean throughput per config and concurrency with a min-max band over the repeated samples."""
    grouped: dict[str, dict[int, list[float]]] = {name: {} for name in config_names}
    for s in samples:
        grouped.setdefault(s.config, {}).setdefault(s.concurrency, []).append(s.output_throughput)
    series: dict[str, list[tuple[int, float, float | None, float | None]]] = {}
    for name, by_level in grouped.items():
        points = []
        for level in sorted(by_level):
            values = by_level[level]
            low, high = (min(values), max(values)) if len(values) > 1 else (None, None)
            points.append((level, statistics.fmean(values), low, high))
        if points:
            series[name] = points
    return series


def comparison_rows_json(report: ExperimentReport) -> list[dict[str, Any]]:
    """The API's `comparison` rows (DESIGN.md contract) plus a few extras."""
    return [
        {
            "candidate": row.candidate,
            "concurrency": row.concurrency,
            "baseline_tok_s": round(row.baseline_tok_s, 3),
            "candidate_tok_s": round(row.candidate_tok_s, 3),
            "speedup": round(row.speedup, 4),
            "ci_low": None if row.ci_low is None else round(row.ci_low, 4),
            "ci_high": None if row.ci_high is None else round(row.ci_high, 4),
            "verdict": row.verdict,
            "baseline_n": row.baseline_n,
            "candidate_n": row.candidate_n,
            "runs_needed": row.runs_needed,
        }
        for row in report.rows
    ]


def report_json(report: ExperimentReport) -> dict[str, Any]:
    """Every table of the comparison page as JSON (the page's permalink plus `export.json`)."""
    return {
        "experiment": {"id": report.experiment.pk, "name": report.experiment.name, "status": report.status},
        "baseline": report.baseline.name,
        "candidates": [c.name for c in report.candidates],
        "comparison": comparison_rows_json(report),
        "break_even": report.break_even,
        "throughput": {
            name: [{"concurrency": c, "mean": m, "low": lo, "high": hi} for c, m, lo, hi in points]
            for name, points in report.throughput_series.items()
        },
    }
