"""An acceptance headroom study as its page and the API show it: the study's experiment report (`reports.py`,
its constant queries) laid out as throughput against accept length (`analysis/headroom.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from experiments.analysis import ComparisonRow
from experiments.analysis import headroom as analysis
from experiments.analysis.explanations import ExplanatoryModel
from experiments.charts.headroom import headroom_figure
from experiments.models import Experiment, HeadroomStudy
from experiments.reads.reports import ExperimentReport, cached_report

STUDY_RELATED = ("config", "source", "experiment__profile", "experiment__host", "experiment__baseline")


@dataclass
class HeadroomView:
    study: HeadroomStudy
    report: ExperimentReport
    result: analysis.Headroom
    figure: dict[str, Any] | None
    model: ExplanatoryModel | None  # the break-even model of the real config, from its logged draft/verify times

    @property
    def status(self) -> str:
        return self.report.status


def study_for(experiment_id: int) -> HeadroomStudy | None:
    """The study whose experiment this is, else the latest study started from it."""
    studies = HeadroomStudy.objects.select_related(*STUDY_RELATED)
    return (
        studies.filter(experiment_id=experiment_id).first()
        or studies.filter(source_id=experiment_id).order_by("-created_at", "-id").first()
    )


def studies_about(experiment: Experiment) -> list[HeadroomStudy]:
    """The studies started from `experiment` and the one it is (if any), newest first: one query, for the links
    of the experiment page."""
    studies = HeadroomStudy.objects.filter(Q(source=experiment) | Q(experiment=experiment))
    return list(studies.select_related("config").order_by("-created_at", "-id"))


def headroom_view(study: HeadroomStudy) -> HeadroomView:
    report = cached_report(study.experiment)
    real = study.config.name
    lengths = {c.name: c.simulated_accept_length for c in report.candidates if c.simulated_accept_length is not None}
    rows = {(row.candidate, row.concurrency): row for row in report.rows}
    accept = {p[0]: p[1] for p in report.accept_length_series.get(real, [])}
    levels = []
    for concurrency in sorted({c for _, c in rows}):
        baseline = next(row.baseline_tok_s for (_, c), row in rows.items() if c == concurrency)
        simulated = [
            _point(length, rows[name, concurrency]) for name, length in lengths.items() if (name, concurrency) in rows
        ]
        own = rows.get((real, concurrency))
        measured = accept.get(concurrency)
        real_point = None if own is None or measured is None else _point(measured, own)
        levels.append(analysis.level_curve(concurrency, baseline, simulated, real_point))
    result = analysis.headroom(levels)
    figure = headroom_figure(result.levels, study.accept_lengths) if result.levels else None
    return HeadroomView(study, report, result, figure, report.models.get(real))


def _point(length: float, row: ComparisonRow) -> analysis.CurvePoint:
    return analysis.CurvePoint(length, row.candidate_tok_s, row.speedup, row.ci_low, row.ci_high)
