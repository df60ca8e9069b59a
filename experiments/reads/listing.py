"""The experiments table: search, filters and sort from a query string (the query string is the saved view), read
in a fixed number of queries whatever the page holds.

Status and duration are computed by the database from the runs, so they filter and sort there. The best speedup
needs the comparison statistics (`analysis.compare`): it is computed from one query of the measurements of the
experiments shown (or, to sort by it, of every experiment the filters keep).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import (
    Case,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Value,
    When,
)

from experiments import analysis
from experiments.models import Candidate, Experiment, Run
from experiments.models.experiments import TAG_PATTERN, TimeTaken
from experiments.reads import samples

PAGE_SIZE = 50
MAX_RANKED = 1000  # a sort by best speedup computes the statistics of at most this many experiments
MAX_QUERY_LENGTH = 100
MAX_TERMS = 6
STATUSES = tuple(Experiment.Status.values)
# Sorts by these columns need the per-run aggregates of every experiment, not only of the page's.
_BY_AGGREGATE = ("status", "duration")
# Column -> the annotation or field it sorts by; "speedup" is sorted in Python after the statistics.
SORTS = {
    "name": "name",
    "host": "host__name",
    "owner": "created_by__username",
    "status": "list_status",
    "duration": "run_time_taken",
    "submitted": "created_at",
    "speedup": "",
}


@dataclass(frozen=True)
class ListingQuery:
    """What the table shows, read from GET parameters; anything malformed is dropped, never an error."""

    q: str = ""
    status: str = ""
    host: str = ""
    owner: str = ""
    tag: str = ""
    sort: str = "submitted"
    descending: bool = True
    page: int = 1

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> ListingQuery:
        sort = params.get("sort", "") or "-submitted"
        descending = sort.startswith("-")
        sort = sort.lstrip("-")
        tag = params.get("tag", "").strip().lower()
        page = params.get("page", "1")
        return cls(
            q=" ".join(params.get("q", "").split())[:MAX_QUERY_LENGTH],
            status=params.get("status", "") if params.get("status", "") in STATUSES else "",
            host=params.get("host", "")[:100],
            owner=params.get("owner", "")[:150],
            tag=tag if TAG_PATTERN.fullmatch(tag) else "",
            sort=sort if sort in SORTS else "submitted",
            descending=descending if sort in SORTS else True,
            page=int(page) if page.isdigit() and len(page) < 7 else 1,
        )

    def params(self, **changes: object) -> dict[str, str]:
        values = {
            "q": self.q,
            "status": self.status,
            "host": self.host,
            "owner": self.owner,
            "tag": self.tag,
            "sort": ("-" if self.descending else "") + self.sort,
            "page": str(self.page),
            **{key: str(value) for key, value in changes.items()},
        }
        defaults = {"sort": "-submitted", "page": "1"}
        return {key: value for key, value in values.items() if value and defaults.get(key) != value}

    def url(self, **changes: object) -> str:
        return "?" + urlencode(self.params(**changes))

    def sort_url(self, column: str) -> str:
        """The header link: sort by `column`, flipping the direction when it already sorts by it."""
        descending = not self.descending if self.sort == column else column in ("submitted", "speedup", "duration")
        return self.url(sort=("-" if descending else "") + column, page=1)

    @property
    def is_filtered(self) -> bool:
        return bool(self.q or self.status or self.host or self.owner or self.tag)


@dataclass
class ExperimentRow:
    experiment: Experiment
    status: str
    candidates: list[str]
    duration: timedelta | None
    time_taken: TimeTaken | None = None
    comparison: analysis.Comparison | None = None
    best: analysis.ComparisonRow | None = None
    settling: str = ""

    @property
    def best_reasons(self) -> list[str]:
        """Why the best row's verdict is what it is (outputs differ, acceptance collapsed), as its page says; what
        would settle it is `settling`."""
        if self.comparison is None or self.best is None:
            return []
        return [r for r in self.comparison.reasons(self.best) if not r.startswith("not settled")]


@dataclass
class Listing:
    query: ListingQuery
    page: Page[Any]
    rows: list[ExperimentRow] = field(default_factory=list)
    # Set when a sort by speedup ranked only the latest this many of the matching experiments.
    ranked_latest: int | None = None


def experiments_table(query: ListingQuery) -> Listing:
    experiments = _filtered(query)
    if query.sort == "speedup":
        # The statistics of the experiments the filters keep (the latest MAX_RANKED: bounded work), then the page;
        # those without a comparison come last either way.
        everything = [_row(e) for e in experiments.order_by("-created_at", "-id")[: MAX_RANKED + 1]]
        capped = len(everything) > MAX_RANKED
        everything = everything[:MAX_RANKED]
        _add_best_speedups(everything)
        measured = [r for r in everything if r.best is not None]
        measured.sort(key=lambda r: r.best.speedup if r.best else 0.0, reverse=query.descending)
        ranked = Paginator([*measured, *(r for r in everything if r.best is None)], PAGE_SIZE).get_page(query.page)
        return Listing(query, ranked, list(ranked.object_list), ranked_latest=MAX_RANKED if capped else None)
    column = F(SORTS[query.sort])
    first = column.desc(nulls_last=True) if query.descending else column.asc(nulls_last=True)
    page: Page[Any]
    if query.sort in _BY_AGGREGATE or query.status:
        page = Paginator(experiments.order_by(first, "-id"), PAGE_SIZE).get_page(query.page)
        shown = list(page.object_list)
    else:
        # Sorted by a column of the row itself: count and cut the page without the per-run aggregates (which
        # would otherwise be computed for every experiment), then read them for the page's rows only.
        plain = _searched(Experiment.objects.all(), query).order_by(first, "-id").values_list("pk", flat=True)
        page = Paginator(plain, PAGE_SIZE).get_page(query.page)
        by_id = experiments.in_bulk(list(page.object_list))
        shown = [by_id[pk] for pk in page.object_list if pk in by_id]
    rows = [_row(e) for e in shown]
    _add_best_speedups(rows)
    return Listing(query, page, rows)


def _filtered(query: ListingQuery) -> QuerySet[Experiment]:
    experiments = (
        Experiment.objects.select_related("host", "created_by", "baseline", "profile")
        .prefetch_related(
            Prefetch("candidate_set", queryset=Candidate.objects.select_related("config").order_by("position"))
        )
        .with_time_taken()
        .annotate(
            n_runs=Count("run"),
            n_queued=Count("run", filter=Q(run__state=Run.State.QUEUED)),
            n_failed=Count("run", filter=Q(run__state=Run.State.FAILED)),
        )
        .annotate(
            list_status=Case(
                When(Q(n_runs=0) | Q(n_queued=F("n_runs")), then=Value(Experiment.Status.QUEUED.value)),
                When(unfinished_runs__gt=0, then=Value(Experiment.Status.RUNNING.value)),
                When(n_failed__gt=0, then=Value(Experiment.Status.FAILED.value)),
                default=Value(Experiment.Status.FINISHED.value),
            ),
            # The calendar span (the API's duration_s, as it always was) ...
            duration=Case(
                When(
                    unfinished_runs=0,
                    then=ExpressionWrapper(F("last_finished_at") - F("first_started_at"), output_field=DurationField()),
                ),
                default=None,
                output_field=DurationField(),
            ),
            # ... and what the Duration column shows and sorts by: the runs' own time (`Experiment.time_taken`).
            run_time_taken=Case(
                When(unfinished_runs=0, then=F("run_time")), default=None, output_field=DurationField()
            ),
        )
    )
    if query.status:
        experiments = experiments.filter(list_status=query.status)
    return _searched(experiments, query)


def _searched(experiments: QuerySet[Experiment], query: ListingQuery) -> QuerySet[Experiment]:
    """The filters that read the experiment's own row and its neighbours (not its runs' aggregates)."""
    if query.host:
        experiments = experiments.filter(host__name=query.host)
    if query.owner:
        experiments = experiments.filter(created_by__username=query.owner)
    if query.tag:
        tag = query.tag
        experiments = experiments.filter(
            Q(tags=tag) | Q(tags__startswith=f"{tag} ") | Q(tags__endswith=f" {tag}") | Q(tags__contains=f" {tag} ")
        )
    for term in query.q.split()[:MAX_TERMS]:
        experiments = experiments.filter(_matches(term))
    return experiments


def _matches(term: str) -> Q:
    """Full-text search as every database does it: each term appears (case-insensitively) in the name, tags or
    notes, the host, the owner, or the name of a config or the notes of a run (subqueries: no row duplicates)."""
    candidates = Candidate.objects.filter(experiment=OuterRef("pk"), config__name__icontains=term)
    runs = Run.objects.filter(experiment=OuterRef("pk"), notes__icontains=term)
    return (
        Q(name__icontains=term)
        | Q(tags__icontains=term)
        | Q(notes__icontains=term)
        | Q(host__name__icontains=term)
        | Q(created_by__username__icontains=term)
        | Q(baseline__name__icontains=term)
        | Q(Exists(candidates))
        | Q(Exists(runs))
    )


def _row(experiment: Experiment) -> ExperimentRow:
    return ExperimentRow(
        experiment=experiment,
        status=experiment.list_status,  # type: ignore[attr-defined]
        candidates=[c.config.name for c in experiment.candidate_set.all()],
        duration=experiment.duration,  # type: ignore[attr-defined]
        time_taken=experiment.time_taken,
    )


def _add_best_speedups(rows: Iterable[ExperimentRow]) -> None:
    """Each row's comparison (the experiment page's, `analysis.judge` over `samples`) and its best cell: one query
    for all rows. The rows' candidates are prefetched with their config and stored equivalence gate."""
    by_id = {row.experiment.pk: row for row in rows}
    values = samples.measurement_values(Q(run__experiment_id__in=list(by_id)), succeeded=True)
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for value in values:
        grouped[value["run__experiment_id"]].append(value)
    for experiment_id, own in grouped.items():
        row = by_id[experiment_id]
        experiment = row.experiment
        candidates = list(experiment.candidate_set.all())
        row.comparison = analysis.judge(
            samples.samples(own),
            baseline=experiment.baseline.name,
            candidates=[c.config.name for c in candidates],
            passes_per_launch=experiment.profile.passes,
            outputs_differ=[c.config.name for c in candidates if c.outputs_differ],
            outputs_match=[c.config.name for c in candidates if c.outputs_match],
            simulated=[c.config.name for c in candidates if c.config.simulated_accept_length is not None],
            speculative=[c.config.name for c in candidates if c.config.is_speculative],
            degenerate=samples.degenerate_reasons(own),
        )
        best = row.comparison.best
        if best is not None:
            row.best = best
            row.settling = row.comparison.needs(best)
