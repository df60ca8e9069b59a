"""Quotas on the shared hosts: what a member may queue (runs pending at once, GPU-hours a day) and on which host, the
refusal past them, and admins setting a member's own values (a host's are part of its edit). A run's GPU-hours are
reserved when it is queued, at the upper end of its estimated time (the one its page shows), and settled to the time
it took once it ends.

One gate: `check_launch_quota` runs inside `experiments.queue_runs`, the only function that creates queued runs, so
every way of queueing (submit, re-run, remedy, profile, headroom, verification, confirmation, a study's rounds, the
beat's scheduled rounds, the history check's confirming launches) is counted by the same rule; a study's whole
budget is checked once more at its start (`check_study_budget`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from experiments.rules import gpu_hours

from ..models import AuditEvent, BenchmarkProfile, Experiment, Host, MemberQuota, Run, ServerConfig
from ..models.runs import RunQuerySet
from ..reads import queueing
from .audit import Actor, record_event


class QuotaExceeded(Exception):
    """Launches past a quota: the message names the limit, what is asked and already pending or used, and who can
    raise it (an admin). The API answers it 429 wherever it is raised (api/base.py); the pages show it as a form
    error or a message."""


def launch_shape(config: ServerConfig, profile: BenchmarkProfile) -> gpu_hours.LaunchShape:
    return gpu_hours.LaunchShape(
        gpus=config.gpu_count,
        concurrency=tuple(profile.concurrency or ()),
        passes=profile.passes,
        num_prompts=profile.num_prompts,
        request_timeout_s=profile.request_timeout_s,
        readiness_timeout_s=profile.readiness_timeout_s,
    )


@dataclass(frozen=True)
class _Charge:
    """Whose quotas launches count against: `member` (None: no member's, e.g. an admin's own experiment re-run by a
    maintainer), and always the host's; `actor` asked (for "you" in the refusal)."""

    member: Any
    actor: Actor

    @property
    def who(self) -> str:
        return "you" if self._is_actor else str(self.member.get_username())

    @property
    def whose(self) -> str:
        return "your" if self._is_actor else f"{self.member.get_username()}'s"

    @property
    def _is_actor(self) -> bool:
        # "you" only to a person asking now; a round the beat or a study queues is read later, by anyone, on a page.
        person = self.actor.via in ("web", "api") and _is_person(self.actor.user)
        return person and self.actor.user.pk == self.member.pk


def _is_person(user: Any) -> bool:
    return user is not None and user.is_authenticated


def _is_admin(user: Any) -> bool:
    return _is_person(user) and user.has_perm("experiments.add_host")


def _charge(actor: Actor, owner: Any) -> _Charge | None:
    """Whose quotas launches of an experiment of `owner` asked by `actor` count against; None for nobody's.

    Exempt, by list: an operator at a `manage.py` command, an admin, and the rounds an admin's own experiment or
    study queues by itself (scheduled, study, confirming). Everything else is held: a member or maintainer at the
    pages or the API, and the rounds the beat, a study or the history check queue for a member. The member is the
    experiment's owner, as the usage counts launches by it (a maintainer re-running a member's experiment spends the
    member's quota), else the person asking."""
    if actor.via == "command" or _is_admin(actor.user):
        return None
    payer = owner if _is_person(owner) else (actor.user if _is_person(actor.user) else None)
    if _is_admin(payer):
        return _Charge(None, actor) if _is_person(actor.user) else None
    return _Charge(payer, actor)


def launch_reservations(
    host: Host, configs: Sequence[ServerConfig], profile: BenchmarkProfile, *, profiled: bool = False
) -> list[float]:
    """The seconds on `host` one launch of each of `configs` reserves: the upper end of its estimated length, from
    the launches a worker measured there (`reads.queueing`); with none measured, what its profile's time-outs allow.
    What the run pages show as its end is the same estimate."""
    kinds = [queueing.launch_kind(config, profile, profiled=profiled) for config in configs]
    return [estimate.total.high for estimate in queueing.launch_estimates(host, kinds)]


def check_launch_quota(
    actor: Actor, experiment: Experiment, configs: Sequence[ServerConfig], launches: int, *, profiled: bool = False
) -> list[float]:
    """Refuse `launches` more launches of each of `configs` in `experiment` past the quotas of whoever they count
    against (`_charge`): runs pending (queued or running) at once, and GPU-hours in 24 h (pending runs at their
    reservation), per member and per host. A member's and a host's values are an admin's where set, else the
    SPECDASH_QUOTA_* defaults. Returns each config's reservation in seconds (`launch_reservations`), which the runs
    keep. Called by `experiments.queue_runs` alone: the one way runs are queued."""
    reserved = launch_reservations(experiment.host, configs, experiment.profile, profiled=profiled)
    charge = _charge(actor, experiment.created_by)
    if charge is None:
        return reserved
    asked = _asked(launches, len(configs))
    hours = launches * sum(c.gpu_count * seconds / 3600 for c, seconds in zip(configs, reserved, strict=True))
    _check_launches(charge, experiment.host, launches * len(configs), asked)
    _check_gpu_hours(charge, experiment.host, hours, f"this asks {hours:,.1f} more for {asked}")
    return reserved


def _asked(launches: int, configs: int) -> str:
    """What was asked, in launches as the forms count them (each launch runs every config once)."""
    return f"{launches:,} launch{'' if launches == 1 else 'es'} of {configs:,} config{'' if configs == 1 else 's'}"


def check_study_budget(
    actor: Actor,
    host: Host,
    configs: Sequence[ServerConfig],
    profile: BenchmarkProfile,
    *,
    max_launches: int,
    max_hours: float | None,
    round_size: int,
) -> None:
    """Refuse a study whose whole budget could take more GPU-hours than its starter (and the host) have left today:
    `max_launches` at the longest launch of its configs, or, with an hours budget, those hours on the GPUs of its
    largest config (the host runs one launch at a time) plus the round that may still run when they end, if less.
    Each of its rounds is held to the quotas again when it is queued (`check_launch_quota`)."""
    charge = _charge(actor, actor.user)
    if charge is None:
        return
    reserved = launch_reservations(host, configs, profile)
    each = max(c.gpu_count * seconds / 3600 for c, seconds in zip(configs, reserved, strict=True))
    hours = max_launches * each
    asks = f"this study's budget asks up to {hours:,.1f} ({max_launches:,} launches x {each:,.1f} each)"
    if max_hours is not None:
        gpus = max(max(1, c.gpu_count) for c in configs)
        timed = max_hours * gpus + (round_size + 1) * each
        if timed < hours:
            hours = timed
            asks = (
                f"this study's budget asks up to {hours:,.1f} ({max_hours:,g} h on {gpus} GPUs, and a last round of "
                f"{round_size + 1} launches x {each:,.1f} each)"
            )
    _check_gpu_hours(charge, host, hours, asks)


_RESERVATION = (
    "A pending run reserves its GPUs x the upper end of its estimated time (with no run measured on the host yet, "
    "the longest its profile's time-outs let it run); once it ends, the time it took counts instead."
)


def _check_launches(charge: _Charge, host: Host, adding: int, asked: str) -> None:
    pending = Run.objects.exclude(state__in=Run.TERMINAL_STATES)
    if charge.member is not None:
        quota = MemberQuota.of(charge.member)
        mine = pending.filter(experiment__created_by=charge.member).count()
        if mine + adding > quota.launch_limit:
            raise QuotaExceeded(
                f"{_runs(quota.launch_limit)} allowed for {charge.who} "
                f"({_member_source(quota, 'launches_queued', 'LAUNCHES_PER_USER')}); this asks {asked}, "
                f"{_runs(adding, pending=False)} ({mine:,} pending). An admin can raise {charge.whose} limit on /team/."
            )
    on_host = pending.filter(host=host).count()
    if on_host + adding > host.launch_quota:
        raise QuotaExceeded(
            f"{_runs(host.launch_quota)} allowed on host {host.name} "
            f"({_host_source(host, 'quota_launches_queued', 'LAUNCHES_PER_HOST')}); this asks {asked}, "
            f"{_runs(adding, pending=False)} ({on_host:,} pending there). An admin can raise the host's limit on "
            f"/hosts/{host.pk}/edit/."
        )


def _check_gpu_hours(charge: _Charge, host: Host, hours: float, asks: str) -> None:
    now = timezone.now()
    if charge.member is not None:
        quota = MemberQuota.of(charge.member)
        used = _gpu_hours(Run.objects.filter(experiment__created_by=charge.member), now)
        if used + hours > quota.gpu_hours_limit:
            raise QuotaExceeded(
                f"{quota.gpu_hours_limit:,.1f} GPU-hours a day allowed for {charge.who} "
                f"({_member_source(quota, 'gpu_hours_per_day', 'GPU_HOURS_PER_USER_PER_DAY')}); {asks} "
                f"({used:,.1f} used or reserved in the last 24 h). {_RESERVATION} "
                f"An admin can raise {charge.whose} limit on /team/."
            )
    on_host = _gpu_hours(Run.objects.filter(host=host), now)
    if on_host + hours > host.gpu_hours_quota:
        raise QuotaExceeded(
            f"{host.gpu_hours_quota:,.1f} GPU-hours a day allowed on host {host.name} "
            f"({_host_source(host, 'quota_gpu_hours_per_day', 'GPU_HOURS_PER_HOST_PER_DAY')}); {asks} "
            f"({on_host:,.1f} used or reserved there in the last 24 h). {_RESERVATION} "
            f"An admin can raise the host's limit on /hosts/{host.pk}/edit/."
        )


def _runs(count: int, *, pending: bool = True) -> str:
    """Runs, as the launch quotas count them: one server launch of one config each."""
    return f"{count:,} {'pending ' if pending else ''}run" + ("" if count == 1 else "s")


def _member_source(quota: MemberQuota, field: str, setting: str) -> str:
    return "set by an admin" if getattr(quota, field) is not None else f"the default, SPECDASH_QUOTA_{setting}"


def _host_source(host: Host, field: str, setting: str) -> str:
    return "set by an admin" if getattr(host, field) is not None else f"the default, SPECDASH_QUOTA_{setting}"


def _gpu_hours(runs: RunQuerySet, now: datetime) -> float:
    """The GPU-hours `runs` count against a daily quota: those pending, and those that started in the window."""
    rows = (
        runs.filter(Q(started_at__gte=now - gpu_hours.WINDOW) | ~Q(state__in=Run.TERMINAL_STATES))
        .select_related("config", "experiment__profile")
        .only(
            "state",
            "config",
            "experiment",
            "experiment__profile",
            "started_at",
            "finished_at",
            "reserved_s",
            "config__tp_size",
            "config__extra_args",
            *(f"experiment__profile__{f}" for f in _SHAPE_FIELDS),
        )
    )
    spans = [
        gpu_hours.LaunchSpan(
            gpus=run.config.gpu_count,
            started_at=run.started_at,
            finished_at=run.finished_at,
            is_finished=run.is_finished,
            # Queued before reservations were kept: the time-outs' bound, as then.
            time_bound_s=run.reserved_s
            if run.reserved_s is not None
            else launch_shape(run.config, run.experiment.profile).time_bound_s,
        )
        for run in rows
    ]
    return gpu_hours.gpu_hours_used(spans, now)


_SHAPE_FIELDS = ("concurrency", "passes", "num_prompts", "request_timeout_s", "readiness_timeout_s")


@transaction.atomic
def do_set_member_quota(user: Any, actor: Actor, **values: Any) -> MemberQuota:
    """Set a member's own quotas (None: back to the default); the audit records each change, before and after."""
    quota, _ = MemberQuota.objects.select_for_update().get_or_create(user=user)
    changes = {
        field: [getattr(quota, field), values[field]]
        for field in MemberQuota.FIELDS
        if field in values and getattr(quota, field) != values[field]
    }
    if not changes:
        return quota
    for field, (_, new) in changes.items():
        setattr(quota, field, new)
    quota.updated_at = timezone.now()
    quota.save(update_fields=[*changes, "updated_at"])
    record_event(actor, AuditEvent.Action.QUOTA, user, changes=changes)
    return quota
