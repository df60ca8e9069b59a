"""Review of results over time: history checks that raise flags, their triage, pinned baselines."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from .. import analysis, series
from ..models import AuditEvent, BenchmarkProfile, Flag, FlagComment, Host, PinnedBaseline, Run, ServerConfig
from .audit import Actor, record_event

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
