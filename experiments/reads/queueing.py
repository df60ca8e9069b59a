"""Where queued and live runs stand: each queued one's place in its host's line and what it waits for, and for
every one of them when it should start and end, as ranges.

A run's length comes from the launches a worker measured on its host (`analysis/launch_estimates.py`: phase by
phase, from the same config, else the same model, else any); a live run's remaining time from the phase it is in
and how long it has been in it. A queued run starts when the runs ahead of it on its host are done: the live one's
remaining time, then each queued one's length, plus a worker's hand-over between two. A dirty host starts nothing
until an admin cleans it: its queue has no start. The GPU-hour quota reserves the upper end of the same estimate,
and the sweep preview prices launches with it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from experiments.analysis.launch_estimates import (
    PHASE_OF_STATE,
    ZERO,
    LaunchEstimate,
    LaunchHistory,
    LaunchKind,
    MeasuredLaunch,
    Span,
)
from experiments.formats import estimates as wording
from experiments.models import BenchmarkProfile, Host, Run, ServerConfig, Study

# Recent runs only: a host's speed and its models change, and the last few hundred are plenty (and bounded for the
# page).
HISTORY_RUNS = 400
# Between one run's end and the next one's claim: the end enqueues the host's next turn, and a worker takes it.
HANDOVER_S = 2.0


def launch_kind(config: ServerConfig, profile: BenchmarkProfile, *, profiled: bool = False) -> LaunchKind:
    """What one launch of `config` with `profile` is, to its estimate (an unsaved config too)."""
    return profile.launch_kind(
        config=config.content_hash or config.compute_hash(), model=config.model_path, profiled=profiled
    )


def run_kind(run: Run) -> LaunchKind:
    return launch_kind(run.config, run.experiment.profile, profiled=run.profile_requested)


@dataclass(frozen=True)
class RunEstimate:
    """When a queued or live run should start and end, from `at`: `start` and `end` in seconds from then (start None
    once it has started; both None where nothing can start: a dirty host), `launch` its length and what that rests
    on, `phase` where it is ("queued", "load", "warmup", "cells", "teardown")."""

    launch: LaunchEstimate
    phase: str
    start: Span | None
    end: Span | None
    at: datetime

    def _at(self, seconds: float) -> datetime:
        return self.at + timedelta(seconds=seconds)

    @property
    def text(self) -> str:
        return wording.estimate_text(
            now=self.at,
            starts=(self._at(self.start.low), self._at(self.start.high)) if self.start else None,
            ends=(self._at(self.end.low), self._at(self.end.high)) if self.end else None,
            queued=self.phase == "queued",
            known=self.launch.is_known,
            based_on=self.launch.based_on,
        )

    def as_json(self) -> dict[str, Any]:
        def clock(span: Span | None) -> dict[str, str] | None:
            if span is None:
                return None
            return {"low": self._at(span.low).isoformat(), "mid": self._at(span.mid).isoformat(),
                    "high": self._at(span.high).isoformat()}  # fmt: skip

        return {
            "phase": self.phase,
            "starts_in_s": self.start.as_json() if self.start else None,
            "ends_in_s": self.end.as_json() if self.end else None,
            "starts_at": clock(self.start),
            "ends_at": clock(self.end),
            "duration_s": self.launch.total.as_json(),
            "basis": self.launch.basis,
            "runs": self.launch.runs,
            "known": self.launch.is_known,
            "based_on": self.launch.based_on,
            "text": self.text,
            "computed_at": self.at.isoformat(),
        }


@dataclass
class QueuedRun:
    run: Run
    position: int  # 1: the next run to start on its host
    waiting_for: str
    estimate: RunEstimate
    ahead_known: bool = True  # whether the live run and every run ahead have measured estimates

    @property
    def starts_in_s(self) -> float | None:
        """The expected start (None: nothing measured to expect it from, or a dirty host)."""
        start = self.estimate.start
        return start.mid if start is not None and self.ahead_known else None

    @property
    def expected_duration_s(self) -> float | None:
        return self.estimate.launch.total.mid if self.estimate.launch.is_known else None

    def as_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "waiting_for": self.waiting_for,
            "starts_in_s": _rounded(self.starts_in_s),
            "expected_duration_s": _rounded(self.expected_duration_s),
        }


@dataclass
class HostQueue:
    host: Host
    runs: list[QueuedRun] = field(default_factory=list)
    active: RunEstimate | None = None

    @property
    def active_remaining_s(self) -> float | None:
        if self.active is None or self.active.end is None or not self.active.launch.is_known:
            return None
        return self.active.end.mid

    @property
    def empties_in_s(self) -> float | None:
        """When the last queued run should be done, or None when any part cannot be estimated."""
        if not self.runs:
            return None
        last = self.runs[-1]
        if last.starts_in_s is None or last.expected_duration_s is None:
            return None
        return last.starts_in_s + last.expected_duration_s

    def estimates(self) -> dict[int, RunEstimate]:
        """Every run's estimate, the live one's and the queued ones', by run id."""
        found = {q.run.pk: q.estimate for q in self.runs}
        if self.active is not None and self.host.active_run_id:
            found[self.host.active_run_id] = self.active
        return found


def launch_histories(host_ids: Iterable[int]) -> dict[int, LaunchHistory]:
    """Each host's latest HISTORY_RUNS measured launches, newest first (two queries, each reading only those runs
    through the run_host_state_finished index, however long the hosts' history)."""
    host_ids = list(host_ids)
    if not host_ids:
        return {}
    measured = Run.objects.measured().filter(state=Run.State.SUCCEEDED, finished_at__isnull=False)
    # Per host, the end of its HISTORY_RUNS-th latest launch (None: it has fewer): a window function would rank
    # every run of every host first, and a UNION of per-host LIMITs is not portable (SQLite).
    oldest = measured.filter(host_id=OuterRef("pk")).order_by("-finished_at").values("finished_at")
    cutoffs = Host.objects.filter(pk__in=host_ids).annotate(cutoff=Subquery(oldest[HISTORY_RUNS - 1 : HISTORY_RUNS]))
    recent = [
        Q(host_id=pk) if cutoff is None else Q(host_id=pk, finished_at__gte=cutoff)
        for pk, cutoff in cutoffs.values_list("pk", "cutoff")
    ]
    launches: dict[int, list[MeasuredLaunch]] = defaultdict(list)
    if recent:
        history = (
            measured.filter(reduce(or_, recent))
            .order_by("-finished_at", "-pk")
            .values_list("host_id", "config__content_hash", "config__model_path", "measured_phases")
        )
        for host_id, config_hash, model, phases in history:
            if len(launches[host_id]) < HISTORY_RUNS:  # runs ending at the same instant as the cutoff
                launches[host_id].append(MeasuredLaunch(config_hash, model, phases or {}))
    return {pk: LaunchHistory(launches[pk]) for pk in host_ids}


def launch_estimate(host: Host, kind: LaunchKind) -> LaunchEstimate:
    """How long one launch of `kind` takes on `host`, from its measured launches (the time-outs' bound if none)."""
    return launch_histories([host.pk])[host.pk].estimate(kind)


def launch_estimates(host: Host, kinds: Sequence[LaunchKind]) -> list[LaunchEstimate]:
    """`launch_estimate` of each of `kinds` on `host`, from one read of its history."""
    history = launch_histories([host.pk])[host.pk]
    return [history.estimate(kind) for kind in kinds]


def host_queues(host_list: Iterable[Host]) -> dict[int, HostQueue]:
    """Every given host's queue in claim order, with the live run's and each queued run's estimate (four queries,
    whatever the number of runs)."""
    hosts: dict[int, Host] = {host.pk: host for host in host_list}
    queued = (
        Run.objects.queued()
        .filter(host_id__in=hosts, cancel_requested=False)
        .select_related("config", "experiment__profile")
        .defer("live_facts", "effective_args")
        .in_claim_order()
    )
    active = {
        run.host_id: run
        for run in Run.objects.filter(pk__in=[h.active_run_id for h in hosts.values() if h.active_run_id])
        .select_related("config", "experiment__profile")
        .defer("live_facts", "effective_args")
    }
    queues = {pk: HostQueue(host) for pk, host in hosts.items()}
    histories = launch_histories(hosts)
    now = timezone.now()
    clock: dict[int, Span | None] = {}
    known: dict[int, bool] = {}
    for pk, queue in queues.items():
        running = active.get(pk)
        if running is not None and not running.is_finished:
            queue.active = _live_estimate(running, histories[pk].estimate(run_kind(running)), now)
        clock[pk] = None if queue.host.is_dirty else (queue.active.end if queue.active else ZERO)
        known[pk] = queue.active is None or queue.active.launch.is_known
    for run in queued:
        queue = queues[run.host_id]
        launch = histories[run.host_id].estimate(run_kind(run))
        start = clock[run.host_id]
        if start is not None:
            start = start + Span(0.0, 0.0, HANDOVER_S)
        end = None if start is None else start + launch.total
        position = len(queue.runs) + 1
        waiting_for = _waiting_for(queue.host, active.get(run.host_id), position)
        estimate = RunEstimate(launch, "queued", start, end, now)
        queue.runs.append(QueuedRun(run, position, waiting_for, estimate, known[run.host_id]))
        clock[run.host_id] = end
        known[run.host_id] = known[run.host_id] and launch.is_known
    return queues


def _live_estimate(run: Run, launch: LaunchEstimate, now: datetime) -> RunEstimate:
    """What is left of a live run: the rest of the phase it is in (by how long it has been in it), then the rest."""
    phase = PHASE_OF_STATE.get(run.state, "load")
    since = _phase_began(run, phase) or run.started_at or now
    left = launch.remaining(phase, max(0.0, (now - since).total_seconds()), run.benchmark_cell)
    return RunEstimate(launch, phase, None, left, now)


def _phase_began(run: Run, phase: str) -> datetime | None:
    for entry in run.timeline or ():
        if PHASE_OF_STATE.get(entry["state"]) == phase:
            return datetime.fromisoformat(entry["at"])
    return None


def run_estimate(run: Run) -> tuple[QueuedRun | None, RunEstimate | None]:
    """A queued run's standing and estimate, or a live run's estimate; (None, None) once it has ended (no query)."""
    if run.is_finished:
        return None, None
    host = Host.objects.get(pk=run.host_id)
    queue = host_queues([host])[host.pk]
    standing = next((q for q in queue.runs if q.run.pk == run.pk), None)
    return standing, queue.estimates().get(run.pk)


def estimates_of(runs: Sequence[Run], host: Host) -> tuple[dict[int, QueuedRun], dict[int, RunEstimate]]:
    """The standing of `runs` queued on `host` and the estimate of each that is queued or live (no query when all
    have ended)."""
    if all(run.is_finished for run in runs):
        return {}, {}
    queue = host_queues([host])[host.pk]
    return {q.run.pk: q for q in queue.runs}, queue.estimates()


def finish_estimate(estimates: Iterable[RunEstimate]) -> RunEstimate | None:
    """When the last of some runs should end (an experiment's pending runs): the latest end, bound by bound."""
    latest: RunEstimate | None = None
    for estimate in estimates:
        if estimate.end is None:
            return None  # one of them cannot start: neither can the whole end be told
        if latest is None or latest.end is None:
            latest = estimate
        else:
            end = Span(max(latest.end.low, estimate.end.low), max(latest.end.mid, estimate.end.mid),
                       max(latest.end.high, estimate.end.high))  # fmt: skip
            pick = estimate if estimate.end.high >= latest.end.high else latest
            latest = RunEstimate(pick.launch, pick.phase, None, end, pick.at)
    return latest


@dataclass(frozen=True)
class StudyEstimate:
    """When a running study should be done: its current round (None: none pending), and the whole study at the
    latest, were it to spend its launch budget (`launches_left` more, each as long as its baseline's launch) and, with
    an hours budget, no later than those hours and the round still running then. It may stop sooner: once its answer
    is known within the precision asked."""

    round_end: RunEstimate | None
    latest: Span
    launches_left: int
    launch: LaunchEstimate
    at: datetime

    def as_json(self) -> dict[str, Any]:
        def clock(span: Span) -> dict[str, str]:
            return {k: (self.at + timedelta(seconds=getattr(span, k))).isoformat() for k in ("low", "mid", "high")}

        return {
            "round": self.round_end.as_json() if self.round_end else None,
            "ends_in_s": self.latest.as_json(),
            "ends_at": clock(self.latest),
            "launches_left": self.launches_left,
            "basis": self.launch.basis,
            "based_on": self.launch.based_on,
            "text": self.text,
            "computed_at": self.at.isoformat(),
        }

    @property
    def text(self) -> str:
        latest = wording.clock_range(self.at + timedelta(seconds=self.latest.high),
                                     self.at + timedelta(seconds=self.latest.high), self.at)  # fmt: skip
        left = f"{self.launches_left:,} launch{'' if self.launches_left == 1 else 'es'} left in its budget"
        whole = f"the whole study by {latest} at the latest ({left}, {self.launch.based_on}; sooner once it settles)"
        if self.round_end is None or self.round_end.end is None:
            return f"This round is not queued yet; {whole}."
        return f"This round: {self.round_end.text}; {whole}."


def study_estimate(study: Study, launches_spent: int) -> StudyEstimate | None:
    """When a running study should be done (None once it has stopped)."""
    if study.state != Study.State.RUNNING:
        return None
    pending = list(
        Run.objects.filter(experiment__studyround__study=study)
        .exclude(state__in=Run.TERMINAL_STATES)
        .select_related("config", "experiment__profile")
    )
    _, estimates = estimates_of(pending, study.host)
    round_end = finish_estimate(estimates.values()) if estimates else None
    launch = launch_estimate(study.host, launch_kind(study.baseline, study.profile))
    left = max(0, study.max_launches - launches_spent - len(pending))
    now = round_end.at if round_end else timezone.now()
    start = round_end.end if round_end and round_end.end else ZERO
    per_launch = launch.total + Span(0.0, 0.0, HANDOVER_S)
    rest = Span(per_launch.low * left, per_launch.mid * left, per_launch.high * left)
    latest = start + rest
    if study.max_hours is not None:
        # No round starts once its hours are spent; the one running then still ends.
        hours_left = max(0.0, (study.created_at + timedelta(hours=study.max_hours) - now).total_seconds())
        one_round = (study.round_size + 1) * per_launch.high
        latest = latest.capped(max(start.high, hours_left + one_round))
    return StudyEstimate(round_end, latest, left, launch, now)


def _waiting_for(host: Host, active: Run | None, position: int) -> str:
    """What the run waits for, to be read after "waits for"."""
    if host.is_dirty:
        return f"an admin to clean {host.name} (it is marked dirty: {host.dirty_reason or 'no reason given'})"
    ahead = f"{position - 1} queued run{'s' if position > 2 else ''} ahead of it" if position > 1 else ""
    if active is not None:
        running = f"run {active.pk} ({active.config.name}, {active.state}) to finish"
        return f"{running} and {ahead}" if ahead else running
    return ahead or f"a worker to start it on {host.name}"


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
