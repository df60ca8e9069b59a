"""A tuning study as its page and `GET /api/studies/{id}` show it: every trial with its state and interval per
concurrency, the best per concurrency, the budget spent, the rounds, and why it stopped (one shape for both)."""

from __future__ import annotations

from typing import Any

from experiments.analysis import racing
from experiments.models import Run, Study
from experiments.reads.queueing import study_estimate
from experiments.reads.study_report import study_history
from experiments.rules import launch_fields, sweeps
from experiments.tuning import plan, recommend
from experiments.tuning.space import SearchSpace


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
        # Why the next round waits (a quota's refusal), "" when it does not.
        "round_refusal": study.round_refusal,
        "space": study.space,
        "space_size": len(configs),
        "concurrency": list(settings.concurrency),
        "precision": {"within": study.tolerance, "confidence": 0.95},
        "budget": {"launches": study.max_launches, "hours": study.max_hours, "launches_spent": history.launches},
        # While it runs: when its current round should be done and the whole study at the latest (its budget spent),
        # with the sentence its page shows; null once it has stopped.
        "estimate": estimate.as_json() if (estimate := study_estimate(study, history.launches)) else None,
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


def _values(space: SearchSpace, name: str) -> dict[str, Any]:
    """The parameter values a config runs with, by the names its engine's users know them (SGLang's steps, topk and
    draft tokens; vLLM's num_speculative_tokens), then each varied flag and variable (the baseline has none)."""
    if name == plan.BASELINE:
        return {}
    candidate = space.candidate(name)
    engine = candidate.get("engine") or launch_fields.SGLANG
    values: dict[str, Any] = {}
    if space.sweep.methods:
        values["method"] = candidate.get("speculative_algorithm")
    values.update({shown: candidate.get(field) for field, shown in sweeps.axis_names(engine).items()})
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
