"""The comparison of an experiment, read from the database in a constant number of queries (six); pages and the API
both show it (statistics in `analysis`, figures in `charts/comparison.py`). Four queries whatever the experiment's
size: the runs with their configs, the candidates, every measurement as plain values, and the few live facts of the
succeeded speculative runs that the explanatory model reads; and two for the deployment view (the cells' request rows
and window ends, the runs' power samples)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.db.models import Count, JSONField, Max, Q
from django.db.models.expressions import RawSQL

from experiments import analysis
from experiments.analysis import Point, acceptance, acceptance_positions, steady_state
from experiments.analysis.cells import latency_table, points_series
from experiments.analysis.config_diff import ConfigDiffRow, config_diff_rows
from experiments.analysis.deployment_view import DeploymentView, deployment_view
from experiments.analysis.explanations import ExplanatoryModel, RunFacts, explain
from experiments.analysis.gain_trend import GainTrend, gain_trend
from experiments.analysis.imported_summary import ImportedRunFacts, imported_summary
from experiments.charts import comparison as comparison_charts
from experiments.charts import deployment as deployment_charts
from experiments.models import Candidate, Experiment, Measurement, PinnedBaseline, Run, ServerConfig
from experiments.reads import prompt_reports, samples
from experiments.reads.deployment import cell_facts

# The per-run measurements table of the export: a Measurement's own columns, without the raw client output.
MEASUREMENT_COLUMNS = (
    "pass_index",
    "concurrency",
    "completed",
    "failed",
    "duration_s",
    "output_throughput",
    "total_throughput",
    "request_throughput",
    "input_throughput",
    "accept_length",
    "pooled_accept_length",
    "mean_request_accept_length",
    "server_accept_length",
    "server_mean_e2e_latency_ms",
    *steady_state.KEYS,
    *acceptance_positions.COLUMNS,
    *Measurement.LATENCY_FIELDS,
)
# A finished experiment's report is kept this long (it is rebuilt as soon as its runs change anyway).
REPORT_CACHE_SECONDS = 24 * 3600


@dataclass
class ExperimentReport:
    experiment: Experiment
    runs: list[Run]
    baseline: ServerConfig
    candidates: list[ServerConfig]
    # The one answer (analysis/verdicts.py): rows, verdicts, reasons, break-evens, headline, cards, gate rules.
    comparison: analysis.Comparison
    # Per config: (concurrency, mean output tok/s, 95% CI low, high) over its passes and launches.
    throughput_series: dict[str, list[Point]]
    accept_length_series: dict[str, list[Point]] = field(default_factory=dict)
    latency: list[dict[str, Any]] = field(default_factory=list)
    # Every measurement as queried; the export's per-run table is made from them only when asked for.
    measurement_values: list[dict[str, Any]] = field(default_factory=list)
    config_diff: list[ConfigDiffRow] = field(default_factory=list)
    models: dict[str, ExplanatoryModel] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    pinned: PinnedBaseline | None = None
    # Per candidate with kept outputs: the equivalence gate; per config, concurrency and category: its figures.
    equivalence: dict[str, analysis.Equivalence] = field(default_factory=dict)
    categories: list[dict[str, Any]] = field(default_factory=list)
    # Tokens per GPU against the pace a user sees (analysis/deployment_view.py); None until the baseline has a point.
    deployment: DeploymentView | None = None
    positions: acceptance_positions.PositionsView | None = None  # acceptance per draft position, None: no histograms
    gain_trend: GainTrend | None = None  # the gain at one pace per user, launch by launch; None: one launch
    # What the imported runs' files say (tool, version, throughput, latency, acceptance); None: nothing imported.
    imported_summary: str | None = None

    @property
    def measurements(self) -> list[dict[str, Any]]:
        return [_measurement_row(m) for m in self.measurement_values]

    @functools.cached_property
    def acceptance_cells(self) -> list[dict[str, Any]]:
        """Every cell with an accept length, its three figures side by side and what their disagreement says."""
        return [
            {
                **_measurement_row(m),
                "disagreement": acceptance.disagreement(m["accept_length"], m["pooled_accept_length"]),
            }
            for m in self.measurement_values
            if any(m[column] is not None for column in acceptance.DEFINITIONS)
        ]

    @property
    def rows(self) -> tuple[analysis.ComparisonRow, ...]:
        return self.comparison.rows

    @property
    def break_even(self) -> dict[str, int | None]:
        """Per measured candidate: the concurrency where it stops paying (None: it pays at every level). For one that
        never pays this is its lowest level, kept for the API; `never_pays` names those, and pages say so instead."""
        return self.comparison.break_even

    @property
    def never_pays(self) -> list[str]:
        return self.comparison.never_pays

    @property
    def simulated(self) -> list[str]:
        """The candidates whose accept length is simulated (a headroom study's copies): they measure what a better
        draft would be worth in speed, never a result to deploy, so they are never the headline."""
        return [c.name for c in self.candidates if c.name in self.comparison.simulated]

    @property
    def headline(self) -> str | None:
        return self.comparison.headline

    @property
    def cards(self) -> list[analysis.VerdictCard]:
        return self.comparison.cards

    @property
    def settled_break_even(self) -> dict[str, int]:
        return self.comparison.settled_break_even

    @property
    def acceptance_disagrees(self) -> bool:
        return any(cell["disagreement"] for cell in self.acceptance_cells)

    @property
    def baseline_is_pinned(self) -> bool:
        return self.pinned is not None and self.pinned.config.content_hash == self.baseline.content_hash

    @property
    def status(self) -> str:
        return self.experiment.status_of(self.runs)

    @property
    def has_results(self) -> bool:
        """Something measured to show: a comparison, or a baseline measured alone."""
        return bool(self.rows) or bool(self.throughput_series)

    @property
    def configs(self) -> list[ServerConfig]:
        return [self.baseline, *self.candidates]


THROUGHPUT = "output_throughput"


def build_report(experiment: Experiment, *, with_figures: bool = True) -> ExperimentReport:
    # The live facts are most of a run row's bytes (300 Decode points): the model below reads what it needs.
    runs = list(
        Run.objects.filter(experiment=experiment).select_related("config").defer("live_facts").order_by("sequence")
    )
    candidates = experiment.ordered_candidates()
    baseline = experiment.baseline
    names = [baseline.name] + [c.name for c in candidates]
    values = samples.measurement_values(Q(run__experiment=experiment), "id", *MEASUREMENT_COLUMNS)
    # Passes that say something about speed, of runs that succeeded; the others stay in the measurements table.
    usable = samples.usable(values)
    # The candidates' stored equivalence gates (actions/prompts.py keeps them): the only gate any comparison reads.
    stored = {c.config_id: c for c in Candidate.objects.filter(experiment=experiment)}
    kept = {c.name: stored[c.pk] for c in candidates if c.pk in stored}
    gates = {name: gate for name, candidate in kept.items() if (gate := candidate.gate) is not None}
    comparison = analysis.judge(
        samples.samples(usable),
        baseline=baseline.name,
        candidates=names[1:],
        passes_per_launch=experiment.profile.passes,
        outputs_differ=[name for name, candidate in kept.items() if candidate.outputs_differ],
        outputs_match=[name for name, candidate in kept.items() if candidate.outputs_match],
        outputs_unjudged=experiment.profile.outputs_unjudged,
        simulated=[c.name for c in candidates if c.simulated_accept_length is not None],
        speculative=[c.name for c in candidates if c.is_speculative],
        degenerate=samples.degenerate_reasons(usable),
    )
    rows = comparison.rows
    throughput = points_series(((m["run__config__name"], m["concurrency"], m[THROUGHPUT]) for m in usable), names)
    speculative = [c.name for c in candidates if c.is_speculative]
    accept = points_series(
        ((m["run__config__name"], m["concurrency"], m["accept_length"]) for m in usable), speculative, positive=True
    )
    report = ExperimentReport(
        experiment=experiment,
        runs=runs,
        baseline=baseline,
        candidates=candidates,
        comparison=comparison,
        throughput_series=throughput,
        accept_length_series=accept,
        latency=latency_table(usable, names),
        measurement_values=values,
        config_diff=config_diff_rows([baseline, *candidates]),
        pinned=PinnedBaseline.objects.of_series(experiment.host_id, experiment.profile.series_key).first(),
        equivalence=gates,
        categories=prompt_reports.category_rows(experiment, names),
        positions=acceptance_positions.positions_view(usable, baseline.name, names[1:]),
        deployment=deployment_view(
            usable,
            baseline,
            candidates,
            cost_per_gpu_hour=experiment.host.cost_per_gpu_hour,
            objective=experiment.profile.slo,
            rows=rows,
            may_win=comparison.may_win,
            facts=cell_facts(usable, with_requests=experiment.profile.slo is not None),
        ),
    )
    report.gain_trend = gain_trend(usable, baseline, candidates, _launch_ends(runs))
    report.imported_summary = imported_summary(_imported_facts(runs), usable)
    report.models = _explanations(experiment, candidates, throughput.get(baseline.name, []), accept)
    if with_figures and report.has_results:
        colors = comparison_charts.config_colors(baseline.name, [c.name for c in candidates])
        report.figures = {
            "throughput": comparison_charts.throughput_figure(throughput, baseline=baseline.name, colors=colors),
            "latency": comparison_charts.latency_figure(report.latency, baseline=baseline.name, colors=colors),
        }
        if rows:
            marked = report.settled_break_even  # a crossing between two conclusive cells, never an inconclusive one
            report.figures["speedup"] = comparison_charts.speedup_figure(rows, break_even=marked, colors=colors)
        if accept:
            report.figures["accept_length"] = comparison_charts.accept_length_figure(accept, colors=colors)
        if report.deployment is not None:
            view = report.deployment
            report.figures["frontier"] = deployment_charts.frontier_figure(
                view.curves, view.frontier, baseline=baseline.name, colors=colors
            )
        if report.gain_trend is not None:
            report.figures["gain_trend"] = deployment_charts.gain_trend_figure(report.gain_trend, colors=colors)
    return report


def _imported_facts(runs: Sequence[Run]) -> list[ImportedRunFacts]:
    return [
        ImportedRunFacts(
            run_id=run.pk,
            config=run.config.name,
            tool=str(run.imported_from.get("tool") or ""),
            version=str(run.imported_from.get("version") or ""),
            measured_at=run.finished_at,
        )
        for run in runs
        if run.imported_from and run.state == Run.State.SUCCEEDED
    ]


def _launch_ends(runs: Sequence[Run]) -> dict[int, datetime | None]:
    """When each launch's last run ended (None while none has)."""
    ends: dict[int, datetime | None] = {}
    for run in runs:
        latest = ends.get(run.launch_index)
        if run.finished_at is not None and (latest is None or run.finished_at > latest):
            ends[run.launch_index] = run.finished_at
        ends.setdefault(run.launch_index, None)
    return ends


def cached_report(experiment: Experiment) -> ExperimentReport:
    """`build_report`, kept in the cache once every run of the experiment has ended: its results then change only
    when a re-run adds runs (or one is measured again), which the key sees. One small query decides; the pinned
    baseline and the experiment row itself (notes, schedule) are always read fresh."""
    facts = Run.objects.filter(experiment=experiment).aggregate(
        runs=Count("id", distinct=True),
        ended=Count("id", distinct=True, filter=Q(state__in=Run.TERMINAL_STATES)),
        succeeded=Count("id", distinct=True, filter=Q(state=Run.State.SUCCEEDED)),
        last_run=Max("id"),
        last_end=Max("finished_at"),
        measured=Count("measurement"),
    )
    if not facts["runs"] or facts["ended"] < facts["runs"]:
        return build_report(experiment)
    # created_at as well as the id: a test database may hand an id out again after a rollback.
    last_end = facts["last_end"].timestamp() if facts["last_end"] else 0
    stamp = "-".join(str(facts[k]) for k in ("runs", "succeeded", "last_run", "measured")) + f"-{last_end}"
    key = f"specdash:report:{experiment.pk}:{experiment.created_at.timestamp()}:{stamp}"
    report = cache.get(key)
    if report is None:
        report = build_report(experiment)
        cache.set(key, report, REPORT_CACHE_SECONDS)
        return report
    report.experiment = experiment
    report.pinned = PinnedBaseline.objects.of_series(experiment.host_id, experiment.profile.series_key).first()
    return report


def _explanations(
    experiment: Experiment,
    candidates: Sequence[ServerConfig],
    baseline_series: Sequence[Point],
    accept: Mapping[str, list[Point]],
) -> dict[str, ExplanatoryModel]:
    """The explanatory model of every speculative candidate, by name (one query)."""
    speculative = [c for c in candidates if c.is_speculative]
    facts = _model_facts(experiment, speculative)
    return {c.name: explain(c, facts.get(c.pk, []), baseline_series, accept) for c in speculative}


def _model_facts(experiment: Experiment, configs: Sequence[ServerConfig]) -> dict[int, list[RunFacts]]:
    """The live facts the explanatory model reads, per config id, from the succeeded runs: one query.

    Only the metrics and each Decode point's line and batch size are read; on PostgreSQL the database picks
    those out of the Decode points, which would otherwise be most of the bytes (and the time) of the page.
    """
    if not configs:
        return {}
    runs = Run.objects.filter(experiment=experiment, config__in=configs, state=Run.State.SUCCEEDED)
    out: dict[int, list[RunFacts]] = {}
    if connection.vendor == "postgresql":
        rows = runs.annotate(
            decode_n=RawSQL("jsonb_path_query_array(live_facts, '$.decode[*].n')", [], output_field=JSONField()),
            decode_batch=RawSQL(
                "jsonb_path_query_array(live_facts, '$.decode[*].running_req')", [], output_field=JSONField()
            ),
        ).values_list("config_id", "live_facts__metrics", "decode_n", "decode_batch")
        for config_id, metrics, lines, batches in rows:
            out.setdefault(config_id, []).append((metrics or {}, list(zip(lines or [], batches or [], strict=False))))
    else:
        for config_id, metrics, decode in runs.values_list("config_id", "live_facts__metrics", "live_facts__decode"):
            points = [(p["n"], p.get("running_req")) for p in decode or [] if "n" in p]
            out.setdefault(config_id, []).append((metrics or {}, points))
    return out


def _measurement_row(m: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "run": m["run_id"],
        "config": m["run__config__name"],
        "launch": m["run__launch_index"],
        "run_state": m["run__state"],
        **{column: m[column] for column in MEASUREMENT_COLUMNS},
    }
