"""What a study's page and GET /api/studies/{id} show: every trial with its state and interval per concurrency,
the best per concurrency, the budget spent, the rounds, and why it stopped (the same reads for both)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from experiments.analysis import degenerate, deployment
from experiments.analysis.deployment_view import curves_of
from experiments.charts import comparison as comparison_charts
from experiments.charts import deployment as deployment_charts
from experiments.charts.study import space_figure
from experiments.models import Candidate, Measurement, Run, ServerConfig, Study
from experiments.reads import samples
from experiments.tuning import plan


def study_history(study: Study) -> plan.History:
    """What the rounds measured: per launch and concurrency one value (the mean of its usable passes,
    `samples.launch_means`), configs whose launch failed without a usable measurement, and launches spent (runs that
    started). Outputs that differ from the baseline's (the candidates' stored gate) keep a config from winning."""
    names = dict(study.studyconfig_set.values_list("config_id", "name"))
    names[study.baseline_id] = plan.BASELINE
    runs = list(
        Run.objects.filter(experiment__studyround__study=study)
        .order_by("experiment__studyround__index", "sequence")
        .values("id", "config_id", "state", "started_at", "degenerate_findings")
    )
    means = samples.launch_means(samples.measurement_values(Q(run_id__in=[r["id"] for r in runs])))
    history = plan.History()
    gated = Candidate.objects.filter(experiment__studyround__study=study, outputs_differ=True)
    history.outputs_differ = {names[c] for c in gated.values_list("config_id", flat=True) if c in names}
    succeeded = [(names[r["config_id"]], r["degenerate_findings"]) for r in runs if r["state"] == Run.State.SUCCEEDED
                 and r["config_id"] in names]  # fmt: skip
    # The baseline stays in every race: without it there is nothing to race against (its own flag is on its
    # experiments' pages and gate).
    history.degenerate = {n: why for n, why in degenerate.config_reasons(succeeded).items() if n != plan.BASELINE}
    for run in runs:
        name = names.get(run["config_id"])
        if name is None or run["started_at"] is None:
            continue  # cancelled while queued (a round without its baseline): no launch spent
        history.launches += 1
        measured = means.get(run["id"])
        if measured:
            history.add(name, measured)
        elif run["state"] == Run.State.FAILED and name != plan.BASELINE:
            history.failed.add(name)
    return history


def figures(report: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The page's search-space figures, per concurrency (those with at least two configs measured)."""
    trials = [t for t in report["trials"] if t["config"] != plan.BASELINE]
    out = []
    for level in report["concurrency"]:
        figure = space_figure(trials, level)
        if figure is not None:
            out.append((level, figure))
    return out


def frontier_figure(study: Study) -> dict[str, Any] | None:
    """Every measured config of the study per GPU against per user, through its concurrencies, with the frontier:
    the deployment view of the experiment page over all the study's rounds. None until the baseline and another
    config have a point."""
    rows = list(
        Measurement.objects.of_succeeded_runs()
        .filter(run__experiment__studyround__study=study)
        .values("run__config__name", "run__config_id", "concurrency", "output_throughput", "mean_tpot_ms")
    )
    configs = ServerConfig.objects.filter(pk__in={row["run__config_id"] for row in rows})
    gpus = {c.name: c.gpu_count for c in configs.only("name", "tp_size", "extra_args")}
    baseline = study.baseline.name
    ordered = {baseline: gpus[baseline], **dict(sorted(gpus.items()))} if baseline in gpus else {}
    curves = curves_of(rows, ordered)
    if baseline not in curves or len(curves) < 2:
        return None
    colors = comparison_charts.config_colors(baseline, [name for name in curves if name != baseline])
    return deployment_charts.frontier_figure(curves, deployment.pareto_front(curves), baseline=baseline, colors=colors)
