"""The bake-off of an experiment or a study (`analysis.bakeoff`): its rows and winners are the experiment's one
comparison (`reports.cached_report`) or the study's own rows and recommendation (`tuning.recommend`), grouped by
method; its costs are what the servers of each config logged (`Run.live_facts["server"]`: the KV pool's tokens and
the weights each model took)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db.models import Q

from experiments.analysis import bakeoff
from experiments.analysis.verdicts import GateOutcome, Winner
from experiments.models import Experiment, Run, ServerConfig, Study
from experiments.reads.reports import cached_report
from experiments.reads.study_report import study_history
from experiments.rules import launch_fields
from experiments.tuning import plan, recommend

NOT_GATED = GateOutcome("inconclusive", "a study's rounds compare outputs in each round's experiment")


def experiment_bakeoff(experiment: Experiment) -> bakeoff.Bakeoff:
    report = cached_report(experiment)
    comparison = report.comparison
    methods = {config.name: method_of(config.engine, config.speculative_algorithm) for config in report.candidates}
    return bakeoff.build(
        comparison.rows,
        baseline=comparison.baseline,
        winners=comparison.winners(),
        methods={name: method for name, method in methods.items() if method is not None},
        costs=config_costs(Q(experiment=experiment), {c.pk: c.name for c in report.configs}),
        reasons=comparison.reasons,
        gate=comparison.outputs_gate,
        may_win=comparison.may_win,
    )


def study_bakeoff(study: Study) -> bakeoff.Bakeoff:
    """The study's rows (each config against the baseline at each concurrency, `recommend.rows`) and its
    recommendation's winner at each concurrency: what its own page and API say, grouped by method."""
    history = study_history(study)
    settings = study.plan_settings()
    space = study.search_space()
    rows = recommend.rows(history, settings)
    winners = study_winners(history, settings, rows)
    methods = {}
    for name in {row.candidate for row in rows}:
        candidate = space.candidate(name)
        method = method_of(candidate.get("engine") or launch_fields.SGLANG, candidate.get("speculative_algorithm"))
        if method is not None:
            methods[name] = method
    names = dict(study.studyconfig_set.values_list("config_id", "name"))
    names[study.baseline_id] = plan.BASELINE

    def reasons(row: Any) -> list[str]:
        out = []
        if row.candidate in history.outputs_differ:
            out.append("its outputs differ from the baseline's at temperature 0")
        if row.candidate in history.degenerate:
            out.append(f"its runs are degenerate: {history.degenerate[row.candidate]}")
        return out

    def may_win(row: Any) -> bool:  # the rule the study's races apply (`plan.History.at`)
        return row.candidate not in history.outputs_differ and row.candidate not in history.degenerate

    return bakeoff.build(
        rows,
        baseline=plan.BASELINE,
        winners=winners,
        methods=methods,
        costs=config_costs(Q(experiment__studyround__study=study), names),
        reasons=reasons,
        gate=lambda name: NOT_GATED,
        may_win=may_win,
    )


def study_winners(history: plan.History, settings: plan.Settings, rows: Sequence[Any]) -> dict[int, Winner]:
    """The study's recommendation at each concurrency as the comparison's winners (`Comparison.winners`' shape):
    the recommended config (None: the baseline) with its row among `rows` (`recommend.rows`)."""
    return {
        best.concurrency: Winner(
            best.concurrency,
            None if best.config == plan.BASELINE else best.config,
            next((r for r in rows if r.candidate == best.config and r.concurrency == best.concurrency), None),
            best.settled,
        )
        for best in recommend.best_per_concurrency(history, settings)
    }


def method_of(engine: str, algorithm: str | None) -> bakeoff.Method | None:
    return bakeoff.Method(algorithm, launch_fields.label(engine)) if algorithm else None


def config_costs(runs: Q, names: Mapping[int, str]) -> dict[str, bakeoff.Costs]:
    """Per config name: the fewest KV-cache tokens any of its succeeded launches' servers held, and its drafter's
    weights per GPU (SGLang logs the drafter's own line; vLLM counts target and drafter together, so its drafter's
    share is its figure less the baseline's of the same experiment)."""
    rows = (
        Run.objects.filter(runs, state=Run.State.SUCCEEDED, config_id__in=list(names))
        .values_list("config_id", "live_facts__server__limits__max_total_num_tokens", "live_facts__server__weights_gib")
        .order_by()
    )
    kv: dict[str, list[int]] = {}
    weights: dict[str, list[Mapping[str, float]]] = {}
    for config_id, tokens, loaded in rows:
        name = names[config_id]
        if isinstance(tokens, int) and tokens > 0:
            kv.setdefault(name, []).append(tokens)
        if isinstance(loaded, dict):
            weights.setdefault(name, []).append(loaded)
    engines = dict(ServerConfig.objects.filter(pk__in=list(names)).values_list("pk", "engine"))
    baseline_all = _most(w.get("all", w.get("target")) for name in _baselines(names) for w in weights.get(name, []))
    out = {}
    for config_id, name in names.items():
        loaded_rows = weights.get(name, [])
        draft = _most(w.get("draft") for w in loaded_rows)
        if draft is None and engines.get(config_id) == launch_fields.VLLM and baseline_all is not None:
            together = _most(w.get("all") for w in loaded_rows)
            draft = max(0.0, together - baseline_all) if together is not None else None
        out[name] = bakeoff.Costs(min(kv[name]) if name in kv else None, draft)
    return out


def _baselines(names: Mapping[int, str]) -> list[str]:
    # The first name is the baseline's in every caller (the report's configs, the study's baseline set last).
    return [name for name in names.values() if name == plan.BASELINE] or list(names.values())[:1]


def _most(values: Iterable[Any]) -> float | None:
    known = [float(v) for v in values if isinstance(v, int | float)]
    return max(known) if known else None
