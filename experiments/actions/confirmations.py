"""The history check of each result: suspect a change, queue a run to confirm it, decide, and hand confirmed
changes to `review.do_raise_flag`. The statistics and why are in `analysis.confirmation`.

Every metric kept over history (`analysis.METRICS`: throughput, and a speculative config's accept length) goes
through the same rule, series by series; what one result suspects, of any metric, is one suspicion with one
confirming launch, since that launch measures every series of the config at once."""

from __future__ import annotations

import dataclasses
import logging
import statistics

from django.db import transaction
from django.utils import timezone

from experiments.reads import series

from .. import analysis
from ..models import AuditEvent, Flag, FlagSeries, Run, SuspectSeries, Suspicion
from .audit import ANALYSIS, record_event
from .experiments import do_rerun_experiment
from .quotas import QuotaExceeded
from .review import do_raise_flag

log = logging.getLogger(__name__)


@transaction.atomic
def do_check_history(run: Run) -> list[Flag]:
    """Check every series this succeeded run added a point to: its value first weighs the suspicions waiting on
    the series; then, if none is left waiting, the series is checked for a new suspicion. Returns the flags
    raised or grown."""
    run = Run.objects.select_related("experiment__profile", "config", "host").get(pk=run.pk)
    decided: dict[int, list[SuspectSeries]] = {}
    touched: dict[int, Suspicion] = {}
    new_means: dict[int, float] = {}
    suspects = []
    for key in series.keys_of_run(run):
        points = series.series_points(key, upto=run)
        positions = {p.run_id: i for i, p in enumerate(points)}
        if run.pk not in positions:
            continue
        waiting, start = False, _level_start(key, positions)
        for row in _awaiting(key):
            if row.suspicion.run_id == run.pk or any(run_id == run.pk for run_id, _ in row.after):
                waiting = True  # this result was counted already (a repeated check changes nothing)
                continue
            row.after = [*row.after, [run.pk, points[positions[run.pk]].value]]
            row.llr = row.test().log_likelihood_ratio([value for _, value in row.after])
            outcome = analysis.verdict(row.llr, seen=len(row.after))
            touched[row.suspicion_id] = row.suspicion
            if outcome == analysis.UNDECIDED:
                waiting = True
            else:
                row.state, row.decided_by = outcome, run
                decided.setdefault(row.suspicion_id, []).append(row)
                if outcome == analysis.CONFIRMED and row.change_run_id in positions:
                    start = max(start, positions[row.change_run_id])  # the series' new level starts there
                    new_means[row.pk] = statistics.fmean(p.value for p in points[start:])
            row.save(update_fields=["after", "llr", "state", "decided_by"])
        if waiting or _confirms_itself(run):
            continue
        found = analysis.suspect_since(
            [p.value for p in points],
            start=start,
            dismissed=_last_dismissed(key, positions),
            metric=analysis.METRICS[key.metric],
        )
        if found is not None:
            suspects.append((key, *found, points))

    flags = []
    for suspicion in touched.values():
        flags += _settle(suspicion, decided.get(suspicion.pk, []), new_means, run)
    if suspects:
        _open_suspicion(run, suspects)
    return flags


def _awaiting(key: series.SeriesKey):
    return SuspectSeries.objects.filter(
        suspicion__host_id=key.host_id,
        suspicion__config_hash=key.config_hash,
        suspicion__profile_key=key.profile_key,
        concurrency=key.concurrency,
        metric=key.metric,
        category=key.category,
        state=SuspectSeries.State.AWAITING,
    ).select_related("suspicion")


def _confirms_itself(run: Run) -> bool:
    """A confirming run weighs its config's suspicions and never starts one of its own: a noisy confirmation
    would otherwise queue a confirmation of the confirmation. Its neighbours (the other configs of the round)
    are ordinary results of their own series."""
    return run.confirms_id is not None and run.confirms.config_hash == run.config.content_hash  # type: ignore[union-attr]


def _level_start(key: series.SeriesKey, positions: dict[int, int]) -> int:
    """Where the series' current level starts: at its last flagged change, else at its first value."""
    changes = FlagSeries.objects.filter(
        flag__host_id=key.host_id,
        flag__profile_key=key.profile_key,
        flag__metric=key.metric,
        config_hash=key.config_hash,
        concurrency=key.concurrency,
        category=key.category,
    ).values_list("change_run_id", flat=True)
    return max((positions[run_id] for run_id in changes if run_id in positions), default=0)


def _last_dismissed(key: series.SeriesKey, positions: dict[int, int]) -> tuple[int, int] | None:
    """[first, end) positions of the values that raised the series' last dismissed suspicion."""
    dismissed = SuspectSeries.objects.filter(
        suspicion__host_id=key.host_id,
        suspicion__config_hash=key.config_hash,
        suspicion__profile_key=key.profile_key,
        concurrency=key.concurrency,
        metric=key.metric,
        category=key.category,
        state=SuspectSeries.State.DISMISSED,
    ).values_list("change_run_id", "suspicion__run_id")
    spans = [
        (positions[first], positions[last] + 1) for first, last in dismissed if first in positions and last in positions
    ]
    return max(spans, key=lambda span: span[1], default=None)


def _open_suspicion(run: Run, suspects: list) -> Suspicion:
    """One suspicion for every suspected series (metric and concurrency) of this result's config, and its first
    confirming run, which serves them all."""
    profile = run.experiment.profile
    suspicion = Suspicion.objects.create(
        host=run.host,
        experiment=run.experiment,
        run=run,
        config=run.config,
        config_hash=run.config.content_hash,
        profile_key=profile.series_key,
        profile_label=profile.series_label,
    )
    for key, index, found, points in suspects:
        SuspectSeries.objects.create(
            suspicion=suspicion,
            metric=key.metric,
            concurrency=key.concurrency,
            category=key.category,
            change_run_id=points[index].run_id,
            last_before_run_id=points[index - 1].run_id,
            direction=found.direction,
            baseline_mean=found.baseline_mean,
            suspected_mean=found.suspected_mean,
            change=found.change,
            score=found.score,
            hypotheses=dataclasses.asdict(found),
        )
    levels = sorted({key.concurrency for key, *_ in suspects})
    metrics = sorted({key.metric for key, *_ in suspects})
    record_event(ANALYSIS, AuditEvent.Action.SUSPECT, suspicion, run=run.pk, concurrency=levels, metrics=metrics)
    _queue_confirmation(suspicion)
    return suspicion


def queue_confirmation_again(run: Run) -> None:
    """`run` was to confirm a suspicion and failed: queue another confirming launch in its place (within the cap), so
    that the suspicion is decided by a measurement, not left waiting for the config's next ordinary result."""
    if run.confirms_id is None:
        return
    suspicion = Suspicion.objects.select_related("experiment").get(pk=run.confirms_id)
    _queue_confirmation(suspicion)


def _queue_confirmation(suspicion: Suspicion) -> None:
    """One more interleaved launch of every config of the suspicion's experiment, on its host: the neighbours
    re-measured beside the suspect show whether the host moved, and drift of the machine cancels as it does in
    any comparison. Skipped while a run of the config is still to come: its result will weigh the suspicion."""
    if not suspicion.can_queue_confirmation:
        return
    try:
        runs = do_rerun_experiment(
            suspicion.experiment, actor=ANALYSIS, launches=1, reason=f"confirm suspicion {suspicion.pk}"
        )
    except QuotaExceeded as exc:
        # Counted like any launch of the owner's: past the quotas, the suspicion waits for the config's next
        # result instead (its savepoint undid the round; the check of this result still commits).
        log.warning("suspicion %s: no confirming launch queued: %s", suspicion.pk, exc)
        return
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(confirms=suspicion)
    suspicion.confirmations += 1
    suspicion.save(update_fields=["confirmations"])


def _settle(suspicion: Suspicion, decided: list[SuspectSeries], new_means: dict[int, float], run: Run) -> list[Flag]:
    """After a result weighed `suspicion`: raise (or grow) its flags with what it confirmed, close it once every
    series is decided, or queue the next confirming run."""
    confirmed = [row for row in decided if row.state == SuspectSeries.State.CONFIRMED]
    flags = []
    # A flag is about one metric: what a suspicion confirmed of each is raised apart (an SGLang upgrade that cut
    # acceptance and throughput is two flags over the same interval, each with its environment diff).
    for metric in sorted({row.metric for row in confirmed}):
        rows = [row for row in confirmed if row.metric == metric]
        flags.append(
            do_raise_flag(suspicion=suspicion, rows=rows, new_means=new_means, confirmed_by=run, actor=ANALYSIS)
        )
    states = set(suspicion.series.values_list("state", flat=True))
    if SuspectSeries.State.AWAITING in states:
        _queue_confirmation(suspicion)
        return flags
    confirmed_any = SuspectSeries.State.CONFIRMED in states
    suspicion.state = Suspicion.State.CONFIRMED if confirmed_any else Suspicion.State.DISMISSED
    suspicion.decided_at = timezone.now()
    suspicion.save(update_fields=["state", "decided_at"])
    record_event(ANALYSIS, AuditEvent.Action.DECIDE, suspicion, state=suspicion.state, by_run=run.pk)
    return flags
