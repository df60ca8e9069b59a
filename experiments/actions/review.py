"""Review of results over time: raising a confirmed change as a flag, its triage, pinned baselines."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone

from ..analysis import METRICS, REGRESSION
from ..models import (
    AuditEvent,
    BenchmarkProfile,
    Flag,
    FlagComment,
    FlagSeries,
    Host,
    PinnedBaseline,
    Run,
    ServerConfig,
    SuspectSeries,
    Suspicion,
)
from .audit import Actor, record_event
from .notifications import notify_flag_raised

CONFIRMED_KIND = "confirmed"


@transaction.atomic
def do_raise_flag(
    *, suspicion: Suspicion, rows: Sequence[SuspectSeries], new_means: dict[int, float], confirmed_by: Run, actor: Actor
) -> Flag:
    """Raise the flag of a confirmed change, or grow the one it belongs to: one flag per change.

    The series a suspicion confirmed of one metric (`rows` all share it) go into one flag (every concurrency of
    the config); a flag already open on the same host, of the same metric, in the same direction, whose interval
    of change overlaps this one's, takes them in too (the configs of one host that moved at the same point: a
    driver or SGLang update). This is the only place a flag
    is born or grows; its subscribers are told when it is born (a flag that grows is the same change).
    """
    intervals = [(row.last_before_run.finished_at, row.change_run.finished_at) for row in rows]
    after = max((a for a, _ in intervals if a is not None), default=None)
    by = min((b for _, b in intervals if b is not None), default=None)
    direction, metric = rows[0].direction, rows[0].metric
    own = suspicion.flag if suspicion.flag is not None and suspicion.flag.metric == metric else None
    flag = own or _open_flag_overlapping(suspicion.host_id, direction, metric, after, by)
    grew = flag is not None
    if flag is None:
        lead = max(rows, key=lambda row: abs(row.change))
        flag = Flag.objects.create(
            host_id=suspicion.host_id,
            config=suspicion.config,
            config_hash=suspicion.config_hash,
            profile_key=suspicion.profile_key,
            profile_label=suspicion.profile_label,
            concurrency=lead.concurrency,
            run=lead.change_run,
            kind=CONFIRMED_KIND,
            metric=metric,
            direction=direction,
            baseline_mean=lead.baseline_mean,
            new_mean=new_means.get(lead.pk, lead.suspected_mean),
            change=new_means.get(lead.pk, lead.suspected_mean) / lead.baseline_mean - 1,
            score=lead.score,
            message="",
            changed_after=after,
            changed_by=by,
            confirmed_by=confirmed_by,
        )
    else:
        # The change happened where every series' interval agrees: the intersection narrows it.
        if after is not None and (flag.changed_after is None or after > flag.changed_after):
            flag.changed_after = after
        if by is not None and (flag.changed_by is None or by < flag.changed_by):
            flag.changed_by = by
    FlagSeries.objects.bulk_create(
        FlagSeries(
            flag=flag,
            config=suspicion.config,
            config_hash=suspicion.config_hash,
            concurrency=row.concurrency,
            category=row.category,
            change_run=row.change_run,
            last_before_run=row.last_before_run,
            confirmed_by=confirmed_by,
            suspicion=row,
            baseline_mean=row.baseline_mean,
            new_mean=new_means.get(row.pk, row.suspected_mean),
            change=new_means.get(row.pk, row.suspected_mean) / row.baseline_mean - 1,
            score=row.score,
        )
        for row in rows
    )
    flag.message = _flag_message(flag)
    flag.updated_at = timezone.now()
    flag.save(update_fields=["message", "changed_after", "changed_by", "updated_at"])
    if suspicion.flag is None:  # the first flag the suspicion raised (a second metric's is found by its interval)
        suspicion.flag = flag
        suspicion.save(update_fields=["flag"])
    record_event(
        actor,
        AuditEvent.Action.FLAG,
        flag,
        grew=grew,
        suspicion=suspicion.pk,
        confirmed_by=confirmed_by.pk,
        metric=metric,
        series=[f"{suspicion.config.name} c={row.concurrency} {row.change:+.1%}" for row in rows],
    )
    if not grew:
        notify_flag_raised(flag)
    return flag


def _open_flag_overlapping(host_id: int, direction: str, metric: str, after, by) -> Flag | None:
    flags = Flag.objects.filter(host_id=host_id, direction=direction, metric=metric, triage__in=Flag.OPEN_STATES)
    if after is not None:
        flags = flags.filter(changed_by__gt=after)
    if by is not None:
        flags = flags.filter(changed_after__lt=by)
    return flags.exclude(changed_after=None).exclude(changed_by=None).order_by("-created_at").first()


def _flag_message(flag: Flag) -> str:
    held = list(flag.series.select_related("config"))
    verb = "fell" if flag.direction == REGRESSION else "rose"
    metric = METRICS[flag.metric]
    parts = [
        f"{s.config.name} c={s.concurrency}{f' ({s.category})' if s.category else ''}: "
        f"{metric.show(s.baseline_mean)} -> {metric.show(s.new_mean)} {metric.unit}"
        for s in held
    ]
    return f"{metric.label} {verb} in {len(held)} series, confirmed by a re-run: " + "; ".join(parts) + "."


@transaction.atomic
def do_triage_flag(flag: Flag, *, actor: Actor, triage: str, assignee, comment: str) -> None:
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
        FlagComment.objects.create(flag=flag, author=actor.user, text=text)
        record_event(actor, AuditEvent.Action.TRIAGE, flag, triage=flag.triage, changes=changes)


@transaction.atomic
def do_triage_flags(flags, *, actor: Actor, triage: str, assign_to_me: bool, comment: str) -> int:
    """Triage several flags alike (the review queue's bulk action); each keeps its own thread and audit entry."""
    count = 0
    for flag in flags:
        assignee = actor.user if assign_to_me else flag.assignee
        do_triage_flag(flag, actor=actor, triage=triage, assignee=assignee, comment=comment)
        count += 1
    return count


@transaction.atomic
def do_pin_baseline(*, host: Host, profile: BenchmarkProfile, config: ServerConfig, actor: Actor) -> PinnedBaseline:
    pinned, _ = PinnedBaseline.objects.update_or_create(
        host=host,
        profile_key=profile.series_key,
        defaults={
            "config": config,
            "profile_label": profile.series_label,
            "pinned_by": actor.user,
            "pinned_at": timezone.now(),
        },
    )
    record_event(actor, AuditEvent.Action.PIN, pinned, config=config.name, profile=profile.series_label)
    return pinned
