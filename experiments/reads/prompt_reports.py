"""The comparison page's prompt-level reads: the equivalence gate of each candidate (its outputs against the
baseline's, same prompts, temperature 0) and the accept length and request speed per prompt category.

Two queries: every succeeded run's per-prompt results (greedy profiles only), and the cells' category figures
(profiles of a prompt set only)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from experiments.analysis.equivalence import Equivalence, check_outputs, merge
from experiments.models import Experiment, Measurement, PromptResults, Run, ServerConfig

# Differing prompts shown side by side per candidate; the rest are counted.
SHOWN_DIVERGENCES = 10


def equivalence(
    experiment: Experiment, baseline: ServerConfig, candidates: Sequence[ServerConfig]
) -> dict[str, Equivalence]:
    """Per candidate measured with outputs kept: its gate against the baseline's first succeeded run with outputs.
    Empty for a profile that samples (temperature > 0): outputs then differ by design. The outputs' digests decide
    which runs differ at all; only those runs' ids (and the reference's) are read, in one more query."""
    profile = experiment.profile
    if not profile.is_greedy:
        return {}
    digests = (
        PromptResults.objects.filter(run__experiment=experiment, run__state=Run.State.SUCCEEDED)
        .exclude(digests={})
        .order_by("run__sequence")
        .values_list("run_id", "run__config_id", "digests")
    )
    runs: dict[int, list[tuple[int, dict[str, str]]]] = defaultdict(list)
    for run_id, config_id, own in digests:
        runs[config_id].append((run_id, own))
    if not runs.get(baseline.pk):
        return {}
    reference_run, reference = runs[baseline.pk][0]
    differing = [
        run_id
        for candidate in candidates
        for run_id, own in runs.get(candidate.pk, [])
        if any(reference.get(k) != v for k, v in own.items() if k in reference)
    ]
    outputs: dict[int, dict[int, list[int]]] = {}
    if differing:
        ids = PromptResults.objects.filter(run_id__in=[reference_run, *differing]).values_list("run_id", "requests")
        outputs = {run_id: PromptResults(requests=requests).outputs() for run_id, requests in ids}
    gates = {}
    for candidate in candidates:
        checks = []
        for run_id, own in runs.get(candidate.pk, []):
            if run_id in outputs:
                checks.append(
                    check_outputs(
                        outputs[reference_run], outputs[run_id], profile.gate_within_tokens, profile.gate_max_share
                    )
                )
            else:  # every digest the same: identical outputs
                common = len(set(own) & set(reference))
                checks.append(Equivalence(common, common, profile.gate_within_tokens, profile.gate_max_share))
        merged = merge(checks)
        if merged is not None:
            gates[candidate.name] = merged
    return gates


def category_rows(experiment: Experiment, names: Sequence[str]) -> list[dict[str, Any]]:
    """Per prompt category and config (category first, configs in the page's order), one cell per concurrency
    level: mean accept length and mean request speed over the cells (passes and launches) of succeeded runs, and
    the requests of the category per cell. Empty for random ids (no categories, no query)."""
    if experiment.profile.prompt_set_id is None or experiment.profile.dataset == "random":  # (dataset: the set's kind)
        return []
    values = Measurement.objects.filter(
        run__experiment=experiment, run__state=Run.State.SUCCEEDED, raw__has_key="categories"
    ).values_list("run__config__name", "concurrency", "raw__categories")
    cells: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for config, concurrency, categories in values:
        for category, figures in (categories or {}).items():
            if isinstance(figures, dict):
                cells[(category, config)][concurrency].append(figures)
    levels = sorted(experiment.profile.concurrency)
    order = {name: i for i, name in enumerate(names)}
    rows = []
    for (category, config), by_level in sorted(cells.items(), key=lambda item: (item[0][0], order.get(item[0][1], 0))):
        measured = [f for level in by_level.values() for f in level]
        rows.append(
            {
                "category": category,
                "config": config,
                "requests": round(statistics.fmean(f.get("requests") or 0 for f in measured), 1),
                "cells": [
                    {
                        "concurrency": level,
                        "accept_length": _mean(f.get("accept_length") for f in by_level.get(level, [])),
                        "request_tok_s": _mean(f.get("mean_request_tok_s") for f in by_level.get(level, [])),
                    }
                    for level in levels
                ],
            }
        )
    return rows


def _mean(values: Any) -> float | None:
    present = [v for v in values if isinstance(v, int | float)]
    return statistics.fmean(present) if present else None
