"""Experiments: the experiment with its comparison (`GET /api/experiments/{id}`; the export is this plus the page's
tables), a queued experiment, its row in the experiments table, its recurring cadence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db.models import Prefetch, Q

from experiments.analysis import Point
from experiments.analysis import acceptance as acceptance_figures
from experiments.models import Experiment, Flag, FlagSeries, Suspicion
from experiments.reads import acceptance, environments
from experiments.reads.listing import ExperimentRow
from experiments.reads.queueing import estimates_of, finish_estimate
from experiments.reads.reports import ExperimentReport

from .comparisons import comparison_rows_json, equivalence_json, outputs_gates_json, verdicts_json
from .deployment import deployment_json
from .flags import flag_json, suspicion_json
from .runs import run_json


def experiment_json(report: ExperimentReport) -> dict[str, Any]:
    """An experiment with its comparison: what the API answers, the CLI gates on and the export starts from."""
    experiment = report.experiment
    queue, estimates = estimates_of(report.runs, experiment.host)
    finish = finish_estimate(estimates[r.pk] for r in report.runs if r.pk in estimates)
    comparison = report.comparison
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "url": experiment.get_absolute_url(),
        "host": experiment.host.name,
        "status": report.status,
        "baseline": report.baseline.name,
        "candidates": [c.name for c in report.candidates],
        # Candidates whose accept length is simulated (a headroom study's): speed only, never a verdict to gate on.
        "simulated_acceptance": report.simulated,
        "runs": [
            run_json(r, with_measurements=False, standing=(queue.get(r.pk), estimates.get(r.pk))) for r in report.runs
        ],
        # While runs are pending: when the last of them should be done (`ends_at`/`ends_in_s`: {low, mid, high}),
        # and the sentence the page shows; null once every run has ended.
        "estimate": finish.as_json() if finish else None,
        "run_candidates_without_baseline": experiment.run_candidates_without_baseline,
        "schedule": cadence_json(experiment),
        "comparison": comparison_rows_json(comparison),
        "headline": comparison.headline,
        # One sentence per candidate (the pages' verdict cards), and the outputs gate's reading of each.
        "verdicts": verdicts_json(comparison),
        "outputs_gate": outputs_gates_json(comparison),
        # Config (candidate or baseline) -> why its runs measure a degenerate benchmark (analysis/degenerate.py): such a
        # candidate is never the headline, the best row or passed by a gate; such a baseline leaves no verdict trusted.
        "degenerate": dict(comparison.degenerate),
        # Per speculative candidate: [{concurrency, mean, low, high, reference}] of the token-weighted figure.
        "accept_length": accept_length_json(report),
        # Each acceptance figure's column, name and definition (analysis/acceptance.py), as the glossary gives them.
        "acceptance_definitions": {
            column: {"name": name, "definition": text}
            for column, (name, text) in acceptance_figures.DEFINITIONS.items()
        },
        "break_even": comparison.break_even,
        "never_pays": comparison.never_pays,
        "equivalence": equivalence_json(report.equivalence),
        "categories": report.categories,
        "deployment": deployment_json(report.deployment) if report.deployment else None,
        # The gain per GPU at one pace per user, launch by launch (analysis/gain_trend.py); null with one launch.
        "gain_trend": report.gain_trend.as_json() if report.gain_trend else None,
        "flags": [flag_json(flag) for flag in _flags_of(experiment)],
        "suspicions": [suspicion_json(s) for s in _suspicions_of(experiment)],
        # Throttled runs, runs at other clocks, runs on a changed machine (the runs' own warnings are in `runs`).
        "reproducibility": _reproducibility_json(environments.reproducibility_warnings(experiment, report.runs)),
    }


def experiment_export_json(report: ExperimentReport) -> dict[str, Any]:
    """`export.json`: the experiment's JSON (above) plus every table of its page."""
    return {
        **experiment_json(report),
        "experiment": {"id": report.experiment.pk, "name": report.experiment.name, "status": report.status},
        "throughput": _points_json(report.throughput_series),
        "latency": report.latency,
        "models": {name: model.as_json() for name, model in report.models.items()},
        "configs": {
            "names": [c.name for c in report.configs],
            "rows": [
                {"field": row.field, "label": row.label, "differs": row.differs, "values": [c.text for c in row.cells]}
                for row in report.config_diff
            ],
        },
        "measurements": report.measurements,
        "position_acceptance": report.positions.as_json() if report.positions else None,
    }


def accept_length_json(report: ExperimentReport) -> dict[str, list[dict[str, Any]]]:
    """Per speculative candidate measured: `[{concurrency, mean, low, high, reference}]`, where `reference` is
    `{mean, run, experiment}` of the last succeeded run of the same series that finished before this experiment was
    created, or None (the first of its series)."""
    by_name = {c.name: c.content_hash for c in report.candidates}
    references = acceptance.references(report, [by_name[n] for n in report.accept_length_series if n in by_name])
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


def _points_json(series: Mapping[str, Sequence[Point]]) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [{"concurrency": c, "mean": m, "low": lo, "high": hi} for c, m, lo, hi in points]
        for name, points in series.items()
    }


def _reproducibility_json(warnings: dict[str, Any]) -> dict[str, Any]:
    return {
        "telemetry_warnings": warnings["telemetry"],
        "machine_differences": [
            {"run": row["run"].pk, "against": row["against"].pk, "text": row["text"]} for row in warnings["machine"]
        ],
    }


def _flags_of(experiment: Experiment):
    """The flags whose change shows in this experiment's runs, also those led by another experiment's series."""
    here = Q(run__experiment=experiment) | Q(series__change_run__experiment=experiment)
    return (
        Flag.objects.filter(here)
        .distinct()
        # The run and what its environment diff reads (its config's hash, its profile's series).
        .select_related("config", "run__config", "run__experiment__profile")
        .prefetch_related(Prefetch("series", FlagSeries.objects.select_related("config")))
    )


def _suspicions_of(experiment: Experiment):
    return Suspicion.objects.filter(experiment=experiment).prefetch_related("series", "confirming_runs")


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
            "said": row.comparison.said(best) if row.comparison else None,
            "reasons": row.comparison.reasons(best) if row.comparison else [],
        },
        "settling": row.settling,
    }


def cadence_json(experiment: Experiment) -> dict[str, Any] | None:
    """The experiment's recurring cadence (the API's `schedule` key), None when it runs only when asked."""
    if not experiment.schedule:
        return None
    return {
        "every": experiment.schedule,
        "hour_utc": experiment.schedule_hour,
        "next_at": experiment.next_scheduled_at.isoformat() if experiment.next_scheduled_at else None,
        # Why the last scheduled round was not queued (a quota's refusal), "" when it was.
        "refusal": experiment.schedule_refusal,
    }
