"""What a study's page and GET /api/studies/{id} show: every trial with its state and interval per concurrency,
the best per concurrency, the budget spent, the rounds, and why it stopped (the same reads for both)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from experiments.analysis import deployment, racing
from experiments.analysis.deployment_view import curves_of
from experiments.charts import comparison as comparison_charts
from experiments.charts import deployment as deployment_charts
from experiments.charts.study import space_figure
from experiments.models import Candidate, Measurement, Run, ServerConfig, Study
from experiments.reads import samples
from experiments.rules import sweeps
from experiments.tuning import plan, recommend
from experiments.tuning.space import SearchSpace


def study_history(study: Study) -> plan.History:
    """What the rounds measured: per launch and concurrency one value (the mean of its usable passes,
    `samples.launch_means`), configs whose launch failed without a usable measurement, and launches spent (runs that
    started). Outputs that differ from the baseline's (the candidates' stored gate) keep a config from winning."""
    names = dict(study.studyconfig_set.values_list("config_id", "name"))
    names[study.baseline_id] = plan.BASELINE
    runs = list(
        Run.objects.filter(experiment__studyround__study=study)
        .order_by("experiment__studyround__index", "sequence")
        .values("id", "config_id", "state", "started_at")
    )
    means = samples.launch_means(samples.measurement_values(Q(run_id__in=[r["id"] for r in runs])))
    history = plan.History()
    gated = Candidate.objects.filter(experiment__studyround__study=study, outputs_differ=True)
    history.outputs_differ = {names[c] for c in gated.values_list("config_id", flat=True) if c in names}
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


def study_json(study: Study) -> dict[str, Any]:
    history = study_history(study)
    settings = study.plan_settings()
    space = study.search_space()
    races = plan.races(history, settings)
    configs = dict(study.studyconfig_set.values_list("name", "config_id"))
    rounds = list(study.studyround_set.select_related("experiment").order_by("index"))
    pending = dict(
        Run.objects.filter(experiment__studyround__study=study)
        .exclude(state__in=Run.TERMINAL_STATES)
        .values_list("config_id", "state")
    )
    trials = []
    tried = (set(history.samples) | history.failed | _planned(rounds)) - {plan.BASELINE}
    for name in [plan.BASELINE, *sorted(tried)]:
        config_id = study.baseline_id if name == plan.BASELINE else configs.get(name)
        cells = []
        for level, race in races.items():
            standing = race.standings.get(name)
            if standing is None:
                continue
            cells.append(
                {
                    "concurrency": level,
                    "tok_s": standing.mean,
                    "low": standing.low,
                    "high": standing.high,
                    "launches": standing.n,
                    "standing": _standing(race, name),
                }
            )
        state = "failed" if name in history.failed else "measured" if cells else "queued"
        if config_id in pending:
            state = "queued" if pending[config_id] == Run.State.QUEUED else "running"
        trials.append(
            {
                "config": name,
                "config_id": config_id,
                # The reference every speedup is over, never a candidate: its `standing` is the racing rule's
                # (kept as the API has it), the page calls it the reference.
                "is_baseline": name == plan.BASELINE,
                "state": state,
                "values": _values(space, name),
                "speedups": {level: _speedup(races[level], name) for level in races},
                "cells": cells,
            }
        )
    best = [vars(b) for b in recommend.best_per_concurrency(history, settings)]
    return {
        "id": study.pk,
        "name": study.name,
        "url": study.get_absolute_url(),
        "host": study.host.name,
        "state": study.state,
        "stop_reason": study.stop_reason,
        "stop_reason_text": study.get_stop_reason_display() if study.stop_reason else "",
        "space": study.space,
        "space_size": len(configs),
        "concurrency": list(settings.concurrency),
        "precision": {"within": study.tolerance, "confidence": 0.95},
        "budget": {"launches": study.max_launches, "hours": study.max_hours, "launches_spent": history.launches},
        "rounds": [
            {
                "index": r.index,
                "experiment": r.experiment_id,
                "url": r.experiment.get_absolute_url(),
                "configs": r.candidates,
            }
            for r in rounds
        ],
        "trials": trials,
        "best": best,
        "recommendation": study.recommendation,
    }


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


def _values(space: SearchSpace, name: str) -> dict[str, Any]:
    """The parameter values a config runs with (the baseline has none)."""
    if name == plan.BASELINE:
        return {}
    candidate = space.candidate(name)
    values: dict[str, Any] = {
        "steps": candidate[sweeps.STEPS],
        "topk": candidate[sweeps.TOPK],
        "draft tokens": candidate[sweeps.DRAFT],
    }
    args = list(candidate.get("extra_args") or [])
    values.update({flag: sweeps.flag_value(args, flag) for flag, _ in space.sweep.flags})
    values.update({env: (candidate.get("env") or {}).get(env) for env, _ in space.sweep.env})
    return values


def _speedup(race: racing.Race, name: str) -> float | None:
    mine, base = race.standings.get(name), race.standings.get(plan.BASELINE)
    return mine.mean / base.mean if mine and base else None


def _planned(rounds: list[Any]) -> set[str]:
    return {name for r in rounds for name in r.candidates}


def _standing(race: Any, name: str) -> str:
    if name == race.leader:
        return "leader"
    if name in race.eliminated:
        return "eliminated"
    if name in race.contenders:
        return "contender"
    return "close"
