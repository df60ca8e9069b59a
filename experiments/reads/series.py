"""History series: one metric (`analysis.METRICS`: output throughput, or a speculative config's accept length) of
one (host, config hash, profile, concurrency), run after run, and the accept length of the last runs of one (host,
config hash, profile).

Each point is one succeeded run: the mean of its passes at that concurrency. Reads only; flags are written by
`actions.confirmations.do_check_history`, the statistics are in `analysis.confirmation`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Avg

from experiments import analysis
from experiments.analysis.acceptance import histogram_accept_length
from experiments.models import Measurement, Run

# The cell column each metric's series reads: the accept length is token-weighted over the cell's requests, the
# figure every cell has had since acceptance was measured (the pooled one from /metrics is newer).
COLUMNS = {analysis.THROUGHPUT.key: "output_throughput", analysis.ACCEPTANCE.key: "accept_length"}
# A prompt category's accept length comes from its accepted-drafts histogram (tokens per verify step).
CATEGORIES = "position_acceptance_by_category"


@dataclass(frozen=True)
class SeriesKey:
    host_id: int
    config_hash: str
    profile_key: str
    concurrency: int
    metric: str = analysis.THROUGHPUT.key
    category: str = ""  # an acceptance series of one prompt category ("": the whole cell)


@dataclass(frozen=True)
class SeriesPoint:
    run_id: int
    experiment_id: int
    finished_at: datetime | None
    value: float


def series_points(key: SeriesKey, *, upto: Run | None = None) -> list[SeriesPoint]:
    """The series oldest first (one query), up to and including `upto` when given."""
    column = COLUMNS[key.metric] if not key.category else CATEGORIES
    rows = _of_metric(key.host_id, key.config_hash, key.profile_key, key.metric, by_category=bool(key.category))
    rows = rows.filter(concurrency=key.concurrency)
    if upto is not None and upto.finished_at is not None:
        rows = rows.filter(run__finished_at__lte=upto.finished_at)
    by_run: dict[int, list[float]] = {}
    meta: dict[int, tuple[int, datetime | None]] = {}
    for run_id, experiment_id, finished_at, value in rows.order_by("run__finished_at", "run_id").values_list(
        "run_id", "run__experiment_id", "run__finished_at", column
    ):
        if key.category:
            value = _category_accept_length(value, key.category)
            if value is None:
                continue  # this cell's prompts held none of the category
        by_run.setdefault(run_id, []).append(value)
        meta[run_id] = (experiment_id, finished_at)
    return [
        SeriesPoint(
            run_id=run_id, experiment_id=meta[run_id][0], finished_at=meta[run_id][1], value=statistics.fmean(v)
        )
        for run_id, v in by_run.items()
    ]


def series_by_level(
    host_id: int, config_hash: str, profile_key: str, *, metric: str = analysis.THROUGHPUT.key
) -> dict[int, list[SeriesPoint]]:
    """Every concurrency of one history, each oldest first, averaged per run by the database (one query: the
    history page of a long-measured config reads one row per run and level, not one per pass)."""
    rows = (
        _of_metric(host_id, config_hash, profile_key, metric)
        .values("concurrency", "run_id", "run__experiment_id", "run__finished_at")
        .annotate(value=Avg(COLUMNS[metric]))
        .order_by("concurrency", "run__finished_at", "run_id")
    )
    levels: dict[int, list[SeriesPoint]] = {}
    for row in rows:
        point = SeriesPoint(row["run_id"], row["run__experiment_id"], row["run__finished_at"], row["value"])
        levels.setdefault(row["concurrency"], []).append(point)
    return levels


def recent_accept_lengths(host_id: int, config_hash: str, profile_key: str, *, limit: int = 5) -> list[float]:
    """The accept length of this history's last `limit` succeeded runs, newest first: each run's mean over its
    cells (every concurrency), for the live acceptance alarm to compare a running launch with. One query."""
    rows = (
        _measurements(host_id, config_hash, profile_key)
        .filter(accept_length__isnull=False)
        .values("run_id", "run__finished_at")
        .annotate(value=Avg("accept_length"))
        .order_by("-run__finished_at", "-run_id")[:limit]
    )
    return [float(row["value"]) for row in rows]


def history_cells(host_id: int, profile_key: str, config_hashes: list[str]):
    """The cells of the succeeded runs of these histories (one host and request shape, these configs' contents),
    every concurrency."""
    return Measurement.objects.filter(
        run__host_id=host_id,
        run__config__content_hash__in=config_hashes,
        run__experiment__profile__series_key=profile_key,
        run__state=Run.State.SUCCEEDED,
    )


def _measurements(host_id: int, config_hash: str, profile_key: str):
    """The measured cells of one history, every concurrency: succeeded runs only, failed cells left out."""
    return history_cells(host_id, profile_key, [config_hash]).filter(output_throughput__gt=0)


def _of_metric(host_id: int, config_hash: str, profile_key: str, metric: str, *, by_category: bool = False):
    """The cells of one history that measured `metric` (a cell without an accept length has no acceptance point;
    `by_category`: without per-category histograms, no point in a category's series)."""
    rows = _measurements(host_id, config_hash, profile_key)
    if by_category:
        return rows.filter(**{f"{CATEGORIES}__isnull": False})
    return rows if metric == analysis.THROUGHPUT.key else rows.filter(**{f"{COLUMNS[metric]}__gt": 0})


def _category_accept_length(categories: dict | None, category: str) -> float | None:
    histogram = (categories or {}).get(category, {}).get("accepted_drafts_histogram")
    return histogram_accept_length(histogram) if histogram and sum(histogram) > 0 else None


def keys_of_run(run: Run) -> list[SeriesKey]:
    """The series this run has a point in: throughput at every concurrency it measured, and for a speculative
    config the accept length at every concurrency that reported one (a baseline's would be 1.0 forever), and of
    each prompt category its cells' histograms name (prompt sets with categories)."""
    profile_key = run.experiment.profile.series_key
    cells = run.measurement_set.filter(output_throughput__gt=0)
    levels = sorted(set(cells.values_list("concurrency", flat=True)))
    keys = [SeriesKey(run.host_id, run.config.content_hash, profile_key, level) for level in levels]
    if run.config.is_speculative:
        accepted = sorted(set(cells.filter(accept_length__gt=0).values_list("concurrency", flat=True)))
        keys += [
            SeriesKey(run.host_id, run.config.content_hash, profile_key, level, analysis.ACCEPTANCE.key)
            for level in accepted
        ]
        named: set[tuple[int, str]] = set()
        by_category = cells.filter(**{f"{CATEGORIES}__isnull": False}).values_list("concurrency", CATEGORIES)
        for level, categories in by_category:
            named |= {(level, c) for c in categories or {} if _category_accept_length(categories, c) is not None}
        keys += [
            SeriesKey(run.host_id, run.config.content_hash, profile_key, level, analysis.ACCEPTANCE.key, category)
            for level, category in sorted(named)
        ]
    return keys
