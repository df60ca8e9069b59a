"""The comparison page's prompt-level reads: the equivalence gate of each candidate (its outputs against the
baseline's, same prompts, temperature 0) and the accept length and request speed per prompt category.

Two queries: every succeeded run's per-prompt results (greedy profiles only), and the cells' category figures
(profiles of a prompt set only)."""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from . import analysis
from .analysis.equivalence import Equivalence, check_outputs, merge
from .models import Experiment, Measurement, PromptResults, Run, ServerConfig

# Differing prompts shown side by side per candidate; the rest are counted.
SHOWN_DIVERGENCES = 10


def equivalence(
    experiment: Experiment, baseline: ServerConfig, candidates: Sequence[ServerConfig]
) -> dict[str, Equivalence]:
    """Per candidate measured with outputs kept: its gate against the baseline's first succeeded run with outputs.
    Empty for a profile that samples (temperature > 0): outputs then differ by design."""
    profile = experiment.profile
    if not profile.is_greedy:
        return {}
    results = (
        PromptResults.objects.filter(run__experiment=experiment, run__state=Run.State.SUCCEEDED)
        .order_by("run__sequence")
        .values_list("run__config_id", "requests")
    )
    outputs: dict[int, list[dict[int, list[int]]]] = defaultdict(list)
    for config_id, requests in results:
        kept = PromptResults(requests=requests).outputs()
        if kept:
            outputs[config_id].append(kept)
    if not outputs.get(baseline.pk):
        return {}
    reference = outputs[baseline.pk][0]
    gates = {}
    for candidate in candidates:
        checks = [
            check_outputs(reference, own, profile.gate_within_tokens, profile.gate_max_share)
            for own in outputs.get(candidate.pk, [])
        ]
        merged = merge(checks)
        if merged is not None:
            gates[candidate.name] = merged
    return gates


def gated(rows: list[analysis.ComparisonRow], gates: dict[str, Equivalence]) -> list[analysis.ComparisonRow]:
    """The rows with every verdict of a candidate whose outputs differ replaced: its speed is no win."""
    return [
        dataclasses.replace(row, verdict=analysis.OUTPUTS_DIFFER)
        if row.candidate in gates and gates[row.candidate].outputs_differ
        else row
        for row in rows
    ]


def category_rows(experiment: Experiment, names: Sequence[str]) -> list[dict[str, Any]]:
    """Per config, concurrency and prompt category: requests per cell, mean accept length and mean request speed
    over the cells (passes and launches) of succeeded runs. Empty for random ids (no categories, no query)."""
    if experiment.profile.prompt_set_id is None or experiment.profile.dataset == "random":  # (dataset: the set's kind)
        return []
    values = Measurement.objects.filter(
        run__experiment=experiment, run__state=Run.State.SUCCEEDED, raw__has_key="categories"
    ).values_list("run__config__name", "concurrency", "raw__categories")
    cells: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
    for config, concurrency, categories in values:
        for category, figures in (categories or {}).items():
            if isinstance(figures, dict):
                cells[(config, concurrency, category)].append(figures)
    order = {name: i for i, name in enumerate(names)}
    rows = []
    for (config, concurrency, category), figures in sorted(
        cells.items(), key=lambda item: (item[0][2], item[0][1], order.get(item[0][0], len(order)))
    ):
        rows.append(
            {
                "config": config,
                "concurrency": concurrency,
                "category": category,
                "requests": round(statistics.fmean(f.get("requests") or 0 for f in figures), 1),
                "accept_length": _mean(f.get("accept_length") for f in figures),
                "request_tok_s": _mean(f.get("mean_request_tok_s") for f in figures),
            }
        )
    return rows


def _mean(values: Any) -> float | None:
    present = [v for v in values if isinstance(v, int | float)]
    return statistics.fmean(present) if present else None


def equivalence_json(gates: dict[str, Equivalence]) -> dict[str, Any]:
    return {name: gate.as_json() for name, gate in gates.items()}
