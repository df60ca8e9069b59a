"""The profiler traces of runs for pages and the API (never the trace bytes, only their summaries), and the diffs
of two runs' breakdowns."""

from __future__ import annotations

from typing import Any

from ..analysis import trace_summary
from ..models import ProfileTrace, Run

MAX_DIFFS = 10


def traces_of(run: Run) -> list[ProfileTrace]:
    """The run's trace rows, rank 0 first at each concurrency, without the trace bytes."""
    return list(ProfileTrace.objects.filter(run=run).defer("trace").order_by("concurrency", "rank"))


def lead_summary(run_id: int, concurrency: int | None = None) -> tuple[ProfileTrace | None, dict[str, Any] | None]:
    """The stored trace that speaks for a run (its lowest rank at the given, else its lowest, concurrency)."""
    rows = ProfileTrace.objects.filter(run_id=run_id, state=ProfileTrace.State.STORED).defer("trace")
    if concurrency is not None:
        rows = rows.filter(concurrency=concurrency)
    row = rows.order_by("concurrency", "rank").first()
    return row, (row.summary if row else None)


def run_diff(before: Run | int, after: Run | int) -> dict[str, Any] | None:
    """How `after`'s decode step breaks down against `before`'s (analysis/trace_summary.diff), or None unless both
    were profiled at a shared concurrency and batch size."""
    before_id = before if isinstance(before, int) else before.pk
    after_id = after if isinstance(after, int) else after.pk
    row_a, summary_a = lead_summary(before_id)
    if row_a is None or summary_a is None:
        return None
    row_b, summary_b = lead_summary(after_id, row_a.concurrency)
    if row_b is None or summary_b is None:
        return None
    change = trace_summary.diff(summary_a, summary_b)
    if change is None:
        return None
    return {"before": before_id, "after": after_id, "concurrency": row_a.concurrency, **change}


def diffs_within_experiment(run: Run) -> list[dict[str, Any]]:
    """This run's breakdown against every other profiled run of its experiment (at most MAX_DIFFS)."""
    others = (
        Run.objects.filter(experiment_id=run.experiment_id, profile_traces__state=ProfileTrace.State.STORED)
        .exclude(pk=run.pk)
        .select_related("config")
        .distinct()
        .order_by("sequence")[:MAX_DIFFS]
    )
    out = []
    for other in others:
        change = run_diff(other, run)
        if change is not None:
            out.append({**change, "other_config": other.config.name, "other_url": other.get_absolute_url()})
    return out
