"""Why a candidate pays or not: the break-even accept length of each speculative candidate, from the verify and
draft times its runs logged (custom log metrics), beside the accept length it measured.

Pure: `reports.py` reads the runs' live facts (one query) and hands them in as `RunFacts`.
"""

from __future__ import annotations

import bisect
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .breakeven import BreakEven, break_even_accept_length
from .intervals import Point

# Metrics of a run's live facts that feed the explanatory model, and the log_metrics that produce them from
# simhost's `EAGLE3 profile:` lines (EAGLE3_PROFILE=1). `draft_ms` there is the draft part of one cycle, all steps.
MODEL_METRICS = {
    "verify_ms": r"Target verify: (?P<verify_ms>[\d.]+) ms",
    "draft_ms": r"draft: (?P<draft_ms>[\d.]+) ms",
}


@dataclass(frozen=True)
class ExplanatoryModel:
    """The break-even accept length of one speculative candidate, or why it cannot be computed.

    `break_even` is set when the runs' live facts have both metrics and the baseline was measured at
    `concurrency` (the lowest level measured, 1 in a usual profile); otherwise `note` says what is missing.
    `samples` counts the verify/draft samples used, `batch_sizes` the batch sizes they were logged at (empty
    when the log did not say).
    """

    candidate: str
    concurrency: int | None
    break_even: BreakEven | None
    missing: list[str]
    note: str
    samples: int = 0
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def pays(self) -> bool | None:
        speedup = self.break_even.predicted_speedup if self.break_even else None
        return None if speedup is None else speedup >= 1

    def as_json(self) -> dict[str, Any]:
        result = self.break_even
        return {
            "concurrency": self.concurrency,
            "missing": self.missing,
            "note": self.note,
            "samples": self.samples,
            "batch_sizes": self.batch_sizes,
            "break_even": None
            if result is None
            else {
                "accept_length": result.accept_length,
                "needed_accept_length": result.needed_accept_length,
                "draft_ms": result.draft_ms,
                "verify_ms": result.verify_ms,
                "steps": result.steps,
                "baseline_step_ms": result.baseline_step_ms,
                "predicted_speedup": result.predicted_speedup,
                "predicted_tok_s": result.predicted_tok_s,
                "message": result.message,
            },
        }


# Per run: the model's metric samples ({name: [[line, value], ...]}) and its Decode points as (line, running_req).
RunFacts = tuple[dict[str, list[list[float]]], list[tuple[int, int | None]]]


class CandidateConfig(Protocol):
    """What the model reads of a speculative config; a `ServerConfig` has it."""

    @property
    def name(self) -> str: ...

    @property
    def speculative_num_steps(self) -> int | None: ...

    @property
    def log_metrics(self) -> Mapping[str, str] | None: ...


def explain(
    config: CandidateConfig,
    runs: Sequence[RunFacts],
    baseline_series: Sequence[Point],
    accept: Mapping[str, list[Point]],
) -> ExplanatoryModel:
    """`analysis.break_even_accept_length` for `config` at the lowest measured concurrency, from its runs' logs.

    Verify and draft times are the medians of the samples in the succeeded runs' live facts. Verify time grows
    with the batch, so when the log's Decode lines tell the batch of each sample, only those logged at the chosen
    concurrency are used; the note says when the samples come from other (or unknown) batch sizes.
    """
    name = config.name
    samples: dict[str, list[tuple[float, int | None]]] = {metric: [] for metric in MODEL_METRICS}
    for metrics, points in runs:
        decode = sorted(points)
        lines = [n for n, _ in decode]
        for metric in MODEL_METRICS:
            for line, value in metrics.get(metric, []):
                # The batch of a sample is that of the last Decode line logged before it.
                index = bisect.bisect_right(lines, line) - 1
                samples[metric].append((value, decode[index][1] if index >= 0 else None))
    missing = [metric for metric, values in samples.items() if not values]
    if missing:
        unconfigured = [metric for metric in missing if metric not in (config.log_metrics or {})]
        hint = (
            f"add {json.dumps({m: MODEL_METRICS[m] for m in unconfigured})} to the config's log_metrics"
            " (simhost prints these lines with EAGLE3_PROFILE=1)"
            if unconfigured
            else "the log_metrics are configured but no succeeded run logged a match"
        )
        return ExplanatoryModel(
            name, None, None, missing, f"The log metrics {' and '.join(missing)} would explain this result: {hint}."
        )
    if not baseline_series:
        return ExplanatoryModel(name, None, None, [], "Needs the baseline's throughput, not measured yet.")

    level, baseline_tok_s = baseline_series[0][0], baseline_series[0][1]
    batch_sizes = sorted({batch for values in samples.values() for _, batch in values if batch is not None})
    at_level = {metric: [v for v, batch in values if batch == level] for metric, values in samples.items()}
    if all(at_level.values()):
        chosen = at_level
        note = f"Verify and draft times logged at batch {level}."
    else:
        chosen = {metric: [v for v, _ in values] for metric, values in samples.items()}
        logged_at = f"batch {', '.join(map(str, batch_sizes))}" if batch_sizes else "unknown batch sizes"
        note = (
            f"Verify and draft times were logged at {logged_at}, not at concurrency {level}: verify time grows"
            " with the batch, so the needed accept length is likely overestimated."
        )
    steps = config.speculative_num_steps or 1
    draft_per_step = statistics.median(chosen["draft_ms"]) / steps
    accept_points = [point for point in accept.get(name, []) if point[0] == level]
    try:
        result = break_even_accept_length(
            baseline_tok_s=baseline_tok_s,
            concurrency=level,
            draft_ms=draft_per_step,
            verify_ms=statistics.median(chosen["verify_ms"]),
            steps=steps,
            accept_length=accept_points[0][1] if accept_points else None,
        )
    except ValueError as error:
        return ExplanatoryModel(name, level, None, [], f"The logged times cannot be used: {error}.")
    count = sum(len(values) for values in chosen.values())
    return ExplanatoryModel(name, level, result, [], note, count, batch_sizes)
