"""Every state change that also enqueues work or broadcasts to browsers. Atomic; side effects on commit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from celery import current_app
from celery.exceptions import TimeoutError as CeleryTimeout
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from . import analysis, broadcast, series
from .models import (
    BenchmarkProfile,
    Candidate,
    Experiment,
    Flag,
    FlagComment,
    Host,
    LogChunk,
    Measurement,
    PinnedBaseline,
    Run,
    ServerConfig,
)

# Tasks are enqueued by name: the domain never imports the workers package.
DRIVE_HOST_TASK = "workers.tasks.drive_host"


def _enqueue_drive_host(host_id: int) -> None:
    transaction.on_commit(lambda: current_app.send_task(DRIVE_HOST_TASK, args=[host_id]))


def interleaved_schedule(configs: Sequence[ServerConfig], launches: int) -> list[tuple[ServerConfig, int]]:
    """A B C A B C ...: slow drift of the machine then hits every config alike."""
    return [(config, launch) for launch in range(launches) for config in configs]


@transaction.atomic
def do_create_experiment(
    *,
    user,
    name: str,
    host: Host,
    baseline: ServerConfig,
    candidates: Sequence[ServerConfig],
    profile: BenchmarkProfile,
) -> Experiment:
    """Save the (validated, unsaved or saved) configs and profile, the experiment and its queued runs."""
    for config in (baseline, *candidates):
        if config.pk is None:
            config.created_by = user
            config.save()
    if profile.pk is None:
        profile.created_by = user
        profile.save()
    experiment = Experiment.objects.create(name=name, host=host, baseline=baseline, profile=profile, created_by=user)
    Candidate.objects.bulk_create(
        Candidate(experiment=experiment, config=config, position=i) for i, config in enumerate(candidates)
    )
    now = timezone.now()
    schedule = interleaved_schedule([baseline, *candidates], profile.launches)
    Run.objects.bulk_create(
        Run(
            experiment=experiment,
            config=config,
            host=host,
            sequence=i,
            launch_index=launch,
            timeline=[{"state": Run.State.QUEUED, "at": now.isoformat()}],
            created_at=now,
        )
        for i, (config, launch) in enumerate(schedule)
    )
    _enqueue_drive_host(host.pk)
    return experiment


@transaction.atomic
def do_cancel_run(run: Run) -> bool:
    """Ask for a run to stop. A queued run is cancelled at once; a live one by its orchestrator (with teardown)."""
    if Run.objects.filter(pk=run.pk, state=Run.State.QUEUED).update(
        state=Run.State.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    ):
        run.refresh_from_db()
        _append_timeline(run, Run.State.CANCELLED)
        transaction.on_commit(lambda: broadcast.send_run_state(run))
        return True
    updated = Run.objects.filter(pk=run.pk, cancel_requested=False).exclude(state__in=Run.TERMINAL_STATES)
    if updated.update(cancel_requested=True) != 1:
        return False
    run.refresh_from_db()
    transaction.on_commit(lambda: broadcast.send_run_state(run))
    return True


def _append_timeline(run: Run, state: str) -> None:
    run.timeline = [*run.timeline, {"state": state, "at": timezone.now().isoformat()}]
    run.save(update_fields=["timeline"])


@transaction.atomic
def do_claim_next_run(host_id: int, worker: str) -> Run | None:
    """Take the host lock for its oldest queued run, or return None if the host is busy, dirty or idle."""
    run = (
        Run.objects.queued()
        .on_host(host_id)
        .filter(cancel_requested=False)
        .order_by("experiment__created_at", "experiment_id", "sequence")
        .first()
    )
    if run is None:
        return None
    locked = Host.objects.filter(pk=host_id, active_run__isnull=True, is_dirty=False).update(active_run=run)
    if locked != 1:
        return None
    # The conditional UPDATE on the run closes the race with a cancel that came in meanwhile.
    now = timezone.now()
    claimed = Run.objects.filter(pk=run.pk, state=Run.State.QUEUED).update(
        state=Run.State.CONNECTING, worker=worker, heartbeat_at=now, started_at=now
    )
    if claimed != 1:
        Host.objects.filter(pk=host_id, active_run=run).update(active_run=None)
        return None
    run.refresh_from_db()
    _append_timeline(run, Run.State.CONNECTING)
    transaction.on_commit(lambda: broadcast.send_run_state(run))
    return run


@transaction.atomic
def do_abandon_run(run: Run, message: str) -> None:
    """Last resort when the orchestrator itself could not run: fail the run and free its host."""
    run.refresh_from_db()
    if not run.is_finished:
        do_record_failure(run, Run.FailureKind.INTERNAL, message)
        do_advance_run(run, Run.State.FAILED)
    do_release_host(run)


@transaction.atomic
def do_release_host(run: Run) -> None:
    Host.objects.filter(pk=run.host_id, active_run=run).update(active_run=None)
    _enqueue_drive_host(run.host_id)


@transaction.atomic
def do_mark_host_dirty(host: Host, reason: str) -> None:
    Host.objects.filter(pk=host.pk).update(is_dirty=True, dirty_reason=reason)


@transaction.atomic
def do_mark_host_clean(host: Host) -> None:
    Host.objects.filter(pk=host.pk).update(is_dirty=False, dirty_reason="")
    _enqueue_drive_host(host.pk)


HOST_PROBE_TIMEOUT = 60


class HostProbeFailed(Exception):
    """A probe of a host got no answer: `status` is 502 when the host failed, 504 when no worker answered."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _ask_worker(task: str, host: Host) -> dict[str, Any]:
    """The web tier holds no SSH keys: a worker connects and answers (within HOST_PROBE_TIMEOUT)."""
    try:
        answer = current_app.send_task(task, args=[host.pk]).get(timeout=HOST_PROBE_TIMEOUT)
    except CeleryTimeout as exc:
        raise HostProbeFailed(
            f"No worker answered within {HOST_PROBE_TIMEOUT} s; is a Celery worker running?", 504
        ) from exc
    if not answer.get("ok"):
        raise HostProbeFailed(answer.get("error") or "the host could not be reached", 502)
    return answer


def do_test_host(host: Host) -> None:
    """Connect through a worker, pin the host key on first contact (verify it after) and store the GPUs.

    The worker writes the key and the inventory; `host` is refreshed with them. Raises HostProbeFailed.
    """
    _ask_worker("workers.tasks.test_host", host)
    host.refresh_from_db()


def host_models(host: Host) -> list[dict[str, Any]]:
    """The model directories under the host's models root (those holding a config.json), read by a worker."""
    return list(_ask_worker("workers.tasks.list_host_models", host)["models"])


@transaction.atomic
def do_advance_run(run: Run, state: str, **facts: Any) -> None:
    """Move a live run to its next state, storing the facts learnt on the way (pid, args, ...)."""
    for field, value in facts.items():
        setattr(run, field, value)
    run.state = state
    run.heartbeat_at = timezone.now()
    if state in Run.TERMINAL_STATES:
        run.finished_at = run.heartbeat_at
    run.timeline = [*run.timeline, {"state": state, "at": run.heartbeat_at.isoformat()}]
    run.save(update_fields=["state", "heartbeat_at", "finished_at", "timeline", *facts])
    transaction.on_commit(lambda: broadcast.send_run_state(run))


@transaction.atomic
def do_update_run(run: Run, *, notify: bool = True, **facts: Any) -> None:
    """Store facts of a live run without a state change (progress, pids, heartbeat)."""
    for field, value in facts.items():
        setattr(run, field, value)
    run.heartbeat_at = timezone.now()
    run.save(update_fields=["heartbeat_at", *facts])
    if notify:
        transaction.on_commit(lambda: broadcast.send_run_state(run))


@transaction.atomic
def do_record_failure(run: Run, kind: str, message: str, excerpt: str = "", first_line: int | None = None) -> None:
    """Remember why a run failed; the first failure wins (later ones are consequences of it)."""
    if run.failure_kind:
        return
    run.failure_kind = kind
    run.failure_message = message[:4000]
    run.failure_excerpt = excerpt[:20000]
    run.failure_first_line = first_line
    run.save(update_fields=["failure_kind", "failure_message", "failure_excerpt", "failure_first_line"])


def do_heartbeat(run: Run, worker: str) -> bool:
    """Say this worker still drives the run; False when another worker has taken it over meanwhile."""
    now = timezone.now()
    if Run.objects.filter(pk=run.pk, worker=worker).update(heartbeat_at=now) != 1:
        return False
    run.heartbeat_at = now
    return True


@transaction.atomic
def do_take_over_run(run_id: int, worker: str, stale_after: timedelta) -> Run | None:
    """Re-attach a live run whose worker stopped beating (died, or lost its network) to `worker`."""
    now = timezone.now()
    taken = (
        Run.objects.active()
        .filter(pk=run_id, heartbeat_at__lt=now - stale_after)
        .update(worker=worker, heartbeat_at=now)
    )
    if taken != 1:
        return None
    return Run.objects.select_related("host").get(pk=run_id)


def is_cancel_requested(run_id: int) -> bool:
    return Run.objects.filter(pk=run_id, cancel_requested=True).exists()


@transaction.atomic
def do_append_log(run: Run, first_line: int, lines: list[str], new_offset: int) -> None:
    """Store a batch of complete log lines and the byte offset after them, in one transaction.

    The unique (run, first_line) constraint plus the conditional update of `log_lines` make a replayed batch
    (after a worker re-attached) fail loudly instead of duplicating lines.
    """
    if not lines:
        return
    updated = Run.objects.filter(pk=run.pk, log_lines=first_line - 1).update(
        log_lines=F("log_lines") + len(lines), log_offset=new_offset, heartbeat_at=timezone.now()
    )
    if updated != 1:
        raise ValueError(f"log batch for run {run.pk} starts at line {first_line}, not after the stored lines")
    LogChunk.objects.create(run=run, first_line=first_line, line_count=len(lines), text="\n".join(lines))
    run.log_lines = first_line - 1 + len(lines)
    run.log_offset = new_offset


@transaction.atomic
def do_record_measurement(run: Run, pass_index: int, concurrency: int, result: dict[str, Any]) -> Measurement:
    fields = {name: result.get(name) for name in Measurement.LATENCY_FIELDS}
    measurement, _ = Measurement.objects.update_or_create(
        run=run,
        pass_index=pass_index,
        concurrency=concurrency,
        defaults=dict(
            completed=result["completed"],
            failed=result.get("failed", 0),
            duration_s=result["duration_s"],
            output_throughput=result["output_throughput"],
            total_throughput=result["total_throughput"],
            request_throughput=result["request_throughput"],
            input_throughput=result.get("input_throughput", 0.0),
            accept_length=result.get("accept_length"),
            server_accept_length=result.get("server_accept_length"),
            server_decode=result.get("server_decode") or {},
            raw=result,
            **fields,
        ),
    )
    return measurement


# Two flags in the same direction this close (in runs) are one finding, reported again by the other test.
SAME_FINDING_WITHIN = 3


@transaction.atomic
def do_check_history(run: Run) -> list[Flag]:
    """Check every series this succeeded run added a point to; store new regressions or improvements as flags."""
    created: list[Flag] = []
    profile = run.experiment.profile
    for key in series.keys_of_run(run):
        points = series.series_points(key, upto=run)
        if len(points) < 2:
            continue
        found = analysis.assess_series([p.value for p in points])
        if not found:
            continue
        positions = {p.run_id: i for i, p in enumerate(points)}
        existing = Flag.objects.filter(
            host_id=key.host_id, config_hash=key.config_hash, profile_key=key.profile_key, concurrency=key.concurrency
        ).values_list("direction", "run_id")
        known = [(direction, positions[run_id]) for direction, run_id in existing if run_id in positions]
        for finding in found:
            if any(d == finding.direction and abs(i - finding.index) <= SAME_FINDING_WITHIN for d, i in known):
                continue
            flag = Flag.objects.create(
                host_id=key.host_id,
                config=run.config,
                config_hash=key.config_hash,
                profile_key=key.profile_key,
                profile_label=profile.series_label,
                concurrency=key.concurrency,
                run_id=points[finding.index].run_id,
                kind=finding.kind,
                direction=finding.direction,
                baseline_mean=finding.baseline_mean,
                new_mean=finding.new_value_or_mean,
                change=finding.change,
                score=finding.score,
                message=finding.message,
            )
            known.append((finding.direction, finding.index))
            created.append(flag)
    return created


@transaction.atomic
def do_triage_flag(flag: Flag, *, user, triage: str, assignee, comment: str) -> None:
    changes = []
    if triage != flag.triage:
        changes.append(f"triage {flag.triage} -> {triage}")
        flag.triage = triage
    if assignee != flag.assignee:
        changes.append(f"assigned to {assignee.username if assignee else 'nobody'}")
        flag.assignee = assignee
    flag.updated_at = timezone.now()
    flag.save(update_fields=["triage", "assignee", "updated_at"])
    # The comment thread is the flag's history: state changes are recorded there too.
    text = "\n".join(filter(None, ["; ".join(changes).capitalize() if changes else "", comment.strip()]))
    if text:
        FlagComment.objects.create(flag=flag, author=user, text=text)


@transaction.atomic
def do_rerun_experiment(experiment: Experiment, *, launches: int = 1) -> list[Run]:
    """Queue `launches` more interleaved launches of every config (A B C A B C ...), to confirm a result."""
    configs = [experiment.baseline, *experiment.ordered_candidates()]
    last = experiment.run_set.order_by("-sequence").values_list("sequence", "launch_index").first()
    next_sequence, next_launch = (last[0] + 1, last[1] + 1) if last else (0, 0)
    now = timezone.now()
    runs = Run.objects.bulk_create(
        Run(
            experiment=experiment,
            config=config,
            host=experiment.host,
            sequence=next_sequence + i,
            launch_index=next_launch + launch,
            timeline=[{"state": Run.State.QUEUED, "at": now.isoformat()}],
            created_at=now,
        )
        for i, (config, launch) in enumerate(interleaved_schedule(configs, launches))
    )
    _enqueue_drive_host(experiment.host_id)
    return runs


@transaction.atomic
def do_pin_baseline(*, host: Host, profile: BenchmarkProfile, config: ServerConfig, user) -> PinnedBaseline:
    pinned, _ = PinnedBaseline.objects.update_or_create(
        host=host,
        profile_key=profile.series_key,
        defaults={
            "config": config,
            "profile_label": profile.series_label,
            "pinned_by": user,
            "pinned_at": timezone.now(),
        },
    )
    return pinned
