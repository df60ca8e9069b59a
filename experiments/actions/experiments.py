"""Creating an experiment and queueing more launches of it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ..analysis.run_order import interleaved_order
from ..models import AuditEvent, BenchmarkProfile, Candidate, Experiment, Host, Run, ServerConfig
from .audit import SCHEDULER, Actor, record_event
from .configs import do_create_config, do_create_profile
from .hosts import enqueue_drive_host
from .quotas import QuotaExceeded, check_launch_quota


@transaction.atomic
def do_create_experiment(
    *,
    actor: Actor,
    name: str,
    host: Host,
    baseline: ServerConfig,
    candidates: Sequence[ServerConfig],
    profile: BenchmarkProfile,
    run_candidates_without_baseline: bool = False,
    profile_traces: bool = False,
) -> Experiment:
    """Save the (validated, unsaved or saved) configs and profile, the experiment and its queued runs. Raises
    QuotaExceeded past the quotas (`queue_runs`; the atomic block undoes everything saved). `profile_traces`:
    every run records profiler traces after its measured cells."""
    save_submitted(actor, [baseline, *candidates], profile)
    experiment = Experiment.objects.create(
        name=name,
        host=host,
        baseline=baseline,
        profile=profile,
        created_by=actor.user,
        run_candidates_without_baseline=run_candidates_without_baseline,
    )
    Candidate.objects.bulk_create(
        Candidate(experiment=experiment, config=config, position=i) for i, config in enumerate(candidates)
    )
    runs = queue_runs(
        experiment,
        [baseline, *candidates],
        profile.launches,
        actor=actor,
        first_sequence=0,
        first_launch=0,
        profile=profile_traces,
    )
    record_event(actor, AuditEvent.Action.SUBMIT, experiment, host=host.name, runs=len(runs))
    return experiment


def save_submitted(actor: Actor, configs: Sequence[ServerConfig], profile: BenchmarkProfile) -> None:
    """Save those of a submission's (validated) configs and profile that are new, as the actor's."""
    for config in configs:
        do_create_config(actor, config)
    do_create_profile(actor, profile)


@transaction.atomic
def do_rerun_experiment(experiment: Experiment, *, actor: Actor, launches: int = 1, reason: str = "") -> list[Run]:
    """Queue `launches` more interleaved launches of every config (A B C A B C ...), to confirm a result. Raises
    QuotaExceeded past the quotas (`queue_runs`)."""
    configs = [experiment.baseline, *experiment.ordered_candidates()]
    last = experiment.run_set.order_by("-sequence").values_list("sequence", "launch_index").first()
    next_sequence, next_launch = (last[0] + 1, last[1] + 1) if last else (0, 0)
    runs = queue_runs(
        experiment, configs, launches, actor=actor, first_sequence=next_sequence, first_launch=next_launch
    )
    detail = {"reason": reason} if reason else {}
    record_event(actor, AuditEvent.Action.RERUN, experiment, launches=launches, runs=len(runs), **detail)
    return runs


@transaction.atomic
def do_set_cadence(experiment: Experiment, *, actor: Actor, every: str, hour: int) -> None:
    """Launch the experiment again every night or week at `hour` UTC (`every` "": no more), so that a baseline
    that moves is caught by the history checks the next morning."""
    experiment.schedule, experiment.schedule_hour, experiment.next_scheduled_at = every, hour, None
    experiment.next_scheduled_at = experiment.next_schedule_time(timezone.now())
    experiment.schedule_refusal = ""  # about the old cadence's round
    experiment.save(update_fields=["schedule", "schedule_hour", "next_scheduled_at", "schedule_refusal"])
    record_event(actor, AuditEvent.Action.SCHEDULE, experiment, every=every or "never", hour_utc=hour)


@transaction.atomic
def do_launch_scheduled_experiment(experiment: Experiment, *, now: datetime) -> list[Run]:
    """The beat's turn of a due experiment: queue one more round of launches, unless the last one is still
    queued or running (a host that falls behind gets no pile of rounds). The conditional update on the due time
    makes a second beat (two deployments, a restart) a no-op. The round counts against the owner's quotas like any
    re-run: one past them is not queued, and the refusal is kept on the experiment (`schedule_refusal`) for its
    owner to read; the next turn tries again."""
    due = experiment.next_scheduled_at
    following = experiment.next_schedule_time(now)
    moved = Experiment.objects.filter(pk=experiment.pk, next_scheduled_at=due).exclude(schedule="")
    if due is None or due > now or moved.update(next_scheduled_at=following) != 1:
        return []
    experiment.next_scheduled_at = following
    if experiment.run_set.exclude(state__in=Run.TERMINAL_STATES).exists():
        return []
    try:
        runs = do_rerun_experiment(experiment, actor=SCHEDULER, launches=experiment.profile.launches)
    except QuotaExceeded as exc:  # its savepoint undid the round; the turn is spent, the refusal kept
        experiment.schedule_refusal = (
            f"The {experiment.schedule} round due {due:%Y-%m-%d %H:%M} UTC was not queued: {exc}"
        )
        experiment.save(update_fields=["schedule_refusal"])
        return []
    if experiment.schedule_refusal:
        experiment.schedule_refusal = ""
        experiment.save(update_fields=["schedule_refusal"])
    return runs


def queue_runs(
    experiment: Experiment,
    configs: Sequence[ServerConfig],
    launches: int,
    *,
    actor: Actor,
    first_sequence: int,
    first_launch: int,
    profile: bool = False,
) -> list[Run]:
    """Queue `launches` interleaved launches of `configs` (A B C A B C ...), numbered on from `first_sequence` and
    `first_launch`, for a worker to drive the host once committed; `profile`: the runs record profiler traces.

    The only function that creates queued runs, and the quota is part of it: raises QuotaExceeded (nothing queued)
    past the quotas of whoever `actor`'s launches count against (`quotas.check_launch_quota`), so no entry point
    can queue a launch the quotas have not counted (`tests/test_quotas_gate.py` holds every other module to it)."""
    # Each config's GPU-hour reservation in seconds, which its runs keep until they end.
    reservations = check_launch_quota(actor, experiment, configs, launches, profiled=profile)
    reserved = {config.pk: seconds for config, seconds in zip(configs, reservations, strict=True)}
    now = timezone.now()
    runs = Run.objects.bulk_create(
        Run(
            experiment=experiment,
            config=config,
            host_id=experiment.host_id,
            sequence=first_sequence + i,
            launch_index=first_launch + launch,
            timeline=[{"state": Run.State.QUEUED, "at": now.isoformat()}],
            created_at=now,
            profile_requested=profile,
            reserved_s=reserved[config.pk],
        )
        for i, (config, launch) in enumerate(interleaved_order(configs, launches))
    )
    enqueue_drive_host(experiment.host_id)
    return runs
