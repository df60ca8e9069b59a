"""Where queued runs stand: each one's place in its host's line, what it waits for, and when it should start.

The estimates come from past durations (claim to end) of succeeded runs: of the same config (content hash) and
request shape (profile series) on the host where there are some, else of the same request shape, else of any run
on the host, else none. A median, so one run that hung in loading does not move every estimate. The sweep
preview estimates its launches from the same durations.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from experiments.analysis.launch_estimates import LaunchEstimate
from experiments.models import Host, Run

# Recent runs only: a host's speed and its models change, and the median of the last few hundred is stable
# enough (and bounded for the page).
HISTORY_RUNS = 400


@dataclass
class QueuedRun:
    run: Run
    position: int  # 1: the next run to start on its host
    waiting_for: str
    starts_in_s: float | None  # None: nothing to estimate from
    expected_duration_s: float | None

    def as_json(self) -> dict:
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
    active_remaining_s: float | None = None

    @property
    def empties_in_s(self) -> float | None:
        """When the last queued run should be done, or None when any part cannot be estimated."""
        if not self.runs:
            return None
        last = self.runs[-1]
        if last.starts_in_s is None or last.expected_duration_s is None:
            return None
        return last.starts_in_s + last.expected_duration_s


class LaunchDurations:
    """How long launches take on one host, from its recent succeeded runs: the median of the closest kind."""

    def __init__(self, rows: Iterable[dict[str, Any]]) -> None:
        self.by_config: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.by_profile: dict[str, list[float]] = defaultdict(list)
        self.on_host: list[float] = []
        for row in rows:
            seconds = (row["finished_at"] - row["started_at"]).total_seconds()
            series = row["experiment__profile__series_key"]
            self.by_config[row["config__content_hash"], series].append(seconds)
            self.by_profile[series].append(seconds)
            self.on_host.append(seconds)

    def estimate(self, series_key: str, config_hash: str | None = None) -> LaunchEstimate | None:
        for values, basis in (
            (self.by_config.get((config_hash or "", series_key)), "config"),
            (self.by_profile.get(series_key), "profile"),
            (self.on_host, "host"),
        ):
            if values:
                return LaunchEstimate(statistics.median(values), len(values), basis)
        return None

    def of(self, run: Run) -> float | None:
        found = self.estimate(run.experiment.profile.series_key, run.config.content_hash)
        return found.seconds if found else None


def launch_durations(host_ids: Iterable[int]) -> dict[int, LaunchDurations]:
    """Each host's latest HISTORY_RUNS succeeded launches (two queries, each reading only those runs through the
    run_host_state_finished index, however long the hosts' history)."""
    host_ids = list(host_ids)
    if not host_ids:
        return {}
    ended = Run.objects.filter(state=Run.State.SUCCEEDED, started_at__isnull=False, finished_at__isnull=False)
    # Per host, the end of its HISTORY_RUNS-th latest launch (None: it has fewer): a window function would rank
    # every run of every host first, and a UNION of per-host LIMITs is not portable (SQLite).
    oldest = ended.filter(host_id=OuterRef("pk")).order_by("-finished_at").values("finished_at")
    cutoffs = Host.objects.filter(pk__in=host_ids).annotate(cutoff=Subquery(oldest[HISTORY_RUNS - 1 : HISTORY_RUNS]))
    recent = [
        Q(host_id=pk) if cutoff is None else Q(host_id=pk, finished_at__gte=cutoff)
        for pk, cutoff in cutoffs.values_list("pk", "cutoff")
    ]
    rows_by_host: dict[int, list[dict[str, Any]]] = defaultdict(list)
    if recent:
        history = (
            ended.filter(reduce(or_, recent))
            .order_by("-finished_at")
            .values("host_id", "started_at", "finished_at", "config__content_hash", "experiment__profile__series_key")
        )
        for row in history:
            if len(rows_by_host[row["host_id"]]) < HISTORY_RUNS:  # runs ending at the same instant as the cutoff
                rows_by_host[row["host_id"]].append(dict(row))
    return {pk: LaunchDurations(rows_by_host[pk]) for pk in host_ids}


def launch_estimate(host: Host, series_key: str) -> LaunchEstimate | None:
    """How long a launch of a profile of `series_key` takes on `host`, from its recent runs (None: it has none)."""
    return launch_durations([host.pk])[host.pk].estimate(series_key)


def host_queues(host_list: Iterable[Host]) -> dict[int, HostQueue]:
    """Every given host's queue in claim order, with estimates (four queries, whatever the number of runs)."""
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
        .defer("live_facts", "timeline", "effective_args")
    }
    queues = {pk: HostQueue(host) for pk, host in hosts.items()}
    durations = launch_durations(hosts)
    now = timezone.now()
    for pk, queue in queues.items():
        running = active.get(pk)
        if running is not None:
            expected = durations[pk].of(running)
            if expected is not None and running.started_at:
                queue.active_remaining_s = max(0.0, expected - (now - running.started_at).total_seconds())
    clock: dict[int, float | None] = {
        pk: (q.active_remaining_s if hosts[pk].active_run_id else 0.0) for pk, q in queues.items()
    }
    for run in queued:
        queue = queues[run.host_id]
        expected = durations[run.host_id].of(run)
        starts_in = clock[run.host_id]
        position = len(queue.runs) + 1
        queue.runs.append(
            QueuedRun(run, position, _waiting_for(queue.host, active.get(run.host_id), position), starts_in, expected)
        )
        clock[run.host_id] = None if starts_in is None or expected is None else starts_in + expected
    return queues


def queued_run(run: Run) -> QueuedRun | None:
    """Where one queued run stands on its host (None once it left the queue)."""
    if run.state != Run.State.QUEUED or run.cancel_requested:
        return None
    host = Host.objects.get(pk=run.host_id)
    return next((q for q in host_queues([host])[host.pk].runs if q.run.pk == run.pk), None)


def queued_runs_of(report) -> dict[int, QueuedRun]:
    """The queue standing of an experiment report's queued runs, by run id (no query when none is queued)."""
    if not any(run.state == Run.State.QUEUED for run in report.runs):
        return {}
    queue = host_queues([report.experiment.host])[report.experiment.host_id]
    return {q.run.pk: q for q in queue.runs}


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
