"""A run's life as its orchestrator records it: claimed, advanced, facts and log stored, failed, cancelled."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .. import broadcast
from ..models import AuditEvent, Host, LogChunk, Measurement, Run
from .audit import Actor, record_event
from .hosts import do_release_host


@transaction.atomic
def do_cancel_run(run: Run, actor: Actor) -> bool:
    """Ask for a run to stop. A queued run is cancelled at once; a live one by its orchestrator (with teardown)."""
    if Run.objects.filter(pk=run.pk, state=Run.State.QUEUED).update(
        state=Run.State.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    ):
        run.refresh_from_db()
        _append_timeline(run, Run.State.CANCELLED)
    else:
        updated = Run.objects.filter(pk=run.pk, cancel_requested=False).exclude(state__in=Run.TERMINAL_STATES)
        if updated.update(cancel_requested=True) != 1:
            return False
        run.refresh_from_db()
    record_event(actor, AuditEvent.Action.CANCEL, run, state=run.state)
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


@transaction.atomic
def do_add_run_warning(run: Run, kind: str, message: str) -> None:
    """Note on the run something that went wrong without failing it (once per kind and message)."""
    run.refresh_from_db(fields=["warnings"])
    if any(w.get("kind") == kind and w.get("message") == message for w in run.warnings):
        return
    run.warnings = [*run.warnings, {"kind": kind, "message": message[:2000], "at": timezone.now().isoformat()}]
    run.save(update_fields=["warnings"])
    transaction.on_commit(lambda: broadcast.send_run_state(run))


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
