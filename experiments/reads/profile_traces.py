"""The profiler traces of runs for pages and the API (never the trace bytes, only their summaries), and the diffs
of two runs' breakdowns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db.models import F, Q

from ..analysis import trace_summary
from ..models import ProfileTrace, Run

if TYPE_CHECKING:
    from .comparisons import Picked

MAX_DIFFS = 10


def traces_of(run: Run) -> list[ProfileTrace]:
    """The run's trace rows, rank 0 first at each concurrency, without the trace bytes."""
    return list(ProfileTrace.objects.filter(run=run).defer("trace").order_by("concurrency", "rank"))


def run_diff(before: Run | int, after: Run | int, *, every_batch_size: bool = False) -> dict[str, Any] | None:
    """How `after`'s decode step breaks down against `before`'s (analysis/trace_summary.diff), or None unless both
    were profiled at a shared concurrency and batch size; with `every_batch_size`, also the diff at each batch size
    both measured (`by_batch_size`)."""
    before_id = before if isinstance(before, int) else before.pk
    after_id = after if isinstance(after, int) else after.pk
    rows = _stored_rows(Q(run_id__in=[before_id, after_id]))
    return _diff_of(
        [r for r in rows if r.run_id == before_id],
        [r for r in rows if r.run_id == after_id],
        every_batch_size=every_batch_size,
    )


def profiled_run_ids(run_ids: Sequence[int]) -> set[int]:
    """Which of these runs have a stored trace (one query)."""
    rows = ProfileTrace.objects.filter(run_id__in=run_ids, state=ProfileTrace.State.STORED)
    return set(rows.values_list("run_id", flat=True))


def diffs_of_picks(picked: Sequence[Picked]) -> list[dict[str, Any]]:
    """Each pick's breakdown against the reference's (the first pick), at every batch size both measured, in one
    query: a picked run speaks for itself, a picked config by its latest profiled run in its experiment. Empty
    unless the reference and at least one other pick were profiled."""
    which = Q()
    for p in picked:
        which |= Q(run_id=p.run.pk) if p.run else Q(run__experiment_id=p.experiment.pk, run__config_id=p.config.pk)
    if not picked:
        return []
    # Latest run first, so that a config's first matching row is its latest profiled run.
    rows = _stored_rows(which, latest_first=True)
    by_pick = []
    for p in picked:
        run_id = next((r.run_id for r in rows if _is_of(r, p)), None)
        by_pick.append((p, run_id, sorted((r for r in rows if r.run_id == run_id), key=_lead_order)))
    (_, reference_id, reference_rows), *others = by_pick
    if reference_id is None:
        return []
    out = []
    for p, run_id, pick_rows in others:
        if run_id is None or run_id == reference_id:
            continue
        change = _diff_of(reference_rows, pick_rows, every_batch_size=True)
        if change is not None:
            out.append({"pick": p.pick.token, "label": p.label, **change})
    return out


def _stored_rows(which: Q, *, latest_first: bool = False) -> list[ProfileTrace]:
    rows = ProfileTrace.objects.filter(which, state=ProfileTrace.State.STORED).defer("trace")
    if latest_first:
        rows = rows.annotate(of_experiment=F("run__experiment_id"), of_config=F("run__config_id")).order_by(
            F("run__finished_at").desc(nulls_last=True), "-run_id"
        )
    return sorted(rows, key=_lead_order) if not latest_first else list(rows)


def _lead_order(row: ProfileTrace) -> tuple[int, int]:
    return (row.concurrency, row.rank)


def _is_of(row: ProfileTrace, p: Picked) -> bool:
    if p.run is not None:
        return row.run_id == p.run.pk
    return getattr(row, "of_experiment", None) == p.experiment.pk and getattr(row, "of_config", None) == p.config.pk


def _diff_of(
    before: list[ProfileTrace], after: list[ProfileTrace], *, every_batch_size: bool = False
) -> dict[str, Any] | None:
    """The diff of two runs' stored rows (each in lead order: concurrency, then rank): `before`'s lead row against
    `after`'s lowest rank at the same concurrency."""
    row_a = before[0] if before else None
    if row_a is None or not row_a.summary:
        return None
    row_b = next((r for r in after if r.concurrency == row_a.concurrency), None)
    if row_b is None or not row_b.summary:
        return None
    change = trace_summary.diff(row_a.summary, row_b.summary)
    if change is None:
        return None
    out = {"before": row_a.run_id, "after": row_b.run_id, "concurrency": row_a.concurrency, **change}
    if every_batch_size:
        sizes = trace_summary.shared_batch_sizes(row_a.summary, row_b.summary)
        out["by_batch_size"] = [
            d for bs in sizes if (d := trace_summary.diff(row_a.summary, row_b.summary, bs)) is not None
        ]
    return out


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
