"""Quotas on the shared hosts: what a member may queue (launches at once, GPU-hours a day) and on which host, the
refusal past them, and admins setting a member's own values (a host's are part of its edit)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from experiments.rules import gpu_hours

from ..models import AuditEvent, BenchmarkProfile, Host, MemberQuota, Run, ServerConfig
from ..models.runs import RunQuerySet
from .audit import Actor, record_event


class QuotaExceeded(Exception):
    """A submission or re-run would queue more launches, or more GPU-hours, than a shared host's quotas allow; the
    message says the limit, what is used, and who can raise it."""


def launch_shape(config: ServerConfig, profile: BenchmarkProfile) -> gpu_hours.LaunchShape:
    return gpu_hours.LaunchShape(
        gpus=config.gpu_count,
        concurrency=tuple(profile.concurrency or ()),
        passes=profile.passes,
        num_prompts=profile.num_prompts,
        request_timeout_s=profile.request_timeout_s,
        readiness_timeout_s=profile.readiness_timeout_s,
    )


def is_held_to_quota(actor: Actor) -> bool:
    """Members at the pages and the API are; admins, commands and the beat's own rounds are not: the quota is what
    one member may take of a host the team shares."""
    user = actor.user
    return (
        actor.via in ("web", "api")
        and user is not None
        and user.is_authenticated
        and not user.has_perm("experiments.add_host")
    )


def check_launch_quota(
    actor: Actor, host: Host, configs: Sequence[ServerConfig], launches: int, profile: BenchmarkProfile
) -> None:
    """Refuse `launches` more launches of each of `configs` by a person past the quotas: launches queued or running
    at once, and GPU-hours in 24 h (pending launches at their bound), per member and per host. A member's and a
    host's values are an admin's where set, else the SPECDASH_QUOTA_* defaults."""
    if not is_held_to_quota(actor):
        return
    user = actor.user
    adding = launches * len(configs)
    added_hours = launches * sum(launch_shape(c, profile).gpu_hours_bound for c in configs)
    quota = MemberQuota.of(user)
    pending = Run.objects.exclude(state__in=Run.TERMINAL_STATES)
    mine = pending.filter(experiment__created_by=user).count()
    if mine + adding > quota.launch_limit:
        raise QuotaExceeded(
            f"This would queue {adding} launches; you have {mine} queued or running, and a member may have at most "
            f"{quota.launch_limit} ({_member_source(quota, 'launches_queued', 'LAUNCHES_PER_USER')}). "
            "Cancel some, wait for them, or ask an admin to raise it."
        )
    on_host = pending.filter(host=host).count()
    if on_host + adding > host.launch_quota:
        raise QuotaExceeded(
            f"This would queue {adding} launches on {host.name}, which has {on_host} queued or running of at most "
            f"{host.launch_quota} ({_host_source(host, 'quota_launches_queued', 'LAUNCHES_PER_HOST')}). "
            "Wait for its queue to shorten, or ask an admin."
        )
    now = timezone.now()
    used = _gpu_hours(Run.objects.filter(experiment__created_by=user), now)
    if used + added_hours > quota.gpu_hours_limit:
        raise QuotaExceeded(
            f"This would reserve {added_hours:,.1f} GPU-hours (each launch's GPUs x the longest its profile's "
            f"timeouts let it run); you have {used:,.1f} GPU-hours used or reserved in the last 24 h, and your limit "
            f"is {quota.gpu_hours_limit:,.1f} a day "
            f"({_member_source(quota, 'gpu_hours_per_day', 'GPU_HOURS_PER_USER_PER_DAY')}). "
            "Shorten the profile's timeouts, cancel queued launches, wait, or ask an admin to raise it."
        )
    on_host_hours = _gpu_hours(Run.objects.filter(host=host), now)
    if on_host_hours + added_hours > host.gpu_hours_quota:
        raise QuotaExceeded(
            f"This would reserve {added_hours:,.1f} GPU-hours on {host.name}, which has {on_host_hours:,.1f} used or "
            f"reserved in the last 24 h of at most {host.gpu_hours_quota:,.1f} a day "
            f"({_host_source(host, 'quota_gpu_hours_per_day', 'GPU_HOURS_PER_HOST_PER_DAY')}). "
            "Wait, or ask an admin to raise it."
        )


def _member_source(quota: MemberQuota, field: str, setting: str) -> str:
    return "set for you by an admin" if getattr(quota, field) is not None else f"SPECDASH_QUOTA_{setting}"


def _host_source(host: Host, field: str, setting: str) -> str:
    return "set for this host by an admin" if getattr(host, field) is not None else f"SPECDASH_QUOTA_{setting}"


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
            time_bound_s=launch_shape(run.config, run.experiment.profile).time_bound_s,
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
