"""Notifications: subscribing, telling subscribers of an event, and delivering one message.

An event is told inside the transaction of the change that caused it, as `Delivery` rows; the messages leave only
after the commit (a rolled-back change tells nobody): e-mail and webhooks through a Celery task that retries,
browser notifications through the channel layer to the pages the user has open.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from experiments.actions import dispatch
from experiments.formats import notification_texts
from experiments.formats.notification_texts import Message
from experiments.live import broadcast
from experiments.reads.reports import build_report

from ..analysis import Comparison
from ..models import AuditEvent, Delivery, Event, Experiment, Flag, Host, Run, StudyRound, Subscription
from .audit import Actor, record_event

MAX_ERROR = 2000

log = logging.getLogger(__name__)


# ---- subscribing ------------------------------------------------------------------------------------------------


@transaction.atomic
def do_subscribe(subscription: Subscription, actor: Actor) -> Subscription:
    subscription.created_by = actor.user
    subscription.save()
    record_event(
        actor, AuditEvent.Action.SUBSCRIBE, subscription, channel=subscription.channel, events=subscription.events
    )
    return subscription


@transaction.atomic
def do_unsubscribe(subscription: Subscription, actor: Actor) -> None:
    record_event(actor, AuditEvent.Action.UNSUBSCRIBE, subscription, channel=subscription.channel)
    subscription.delete()


@transaction.atomic
def do_set_email(user: User, email: str) -> None:
    """The address `user`'s own e-mail subscriptions go to ("": none, they send nothing)."""
    user.email = email
    user.save(update_fields=["email"])


# ---- telling subscribers (called by the actions whose change is the event) ----------------------------------


def notify_if_experiment_ended(experiment_id: int) -> None:
    """Tell the experiment's subscribers once all its runs have ended (again after a re-run has ended)."""
    experiment = Experiment.objects.select_related("host", "created_by").get(pk=experiment_id)
    runs = list(experiment.run_set.all())
    status = experiment.status_of(runs)
    if status not in (Experiment.Status.FINISHED, Experiment.Status.FAILED):
        return
    latest_run = max(run.created_at for run in runs)
    # Conditional: of two transactions ending the experiment's last runs, one tells.
    claimed = Experiment.objects.filter(
        Q(end_notified_at__isnull=True) | Q(end_notified_at__lt=latest_run), pk=experiment.pk
    ).update(end_notified_at=timezone.now())
    if not claimed:
        return
    event = Event.EXPERIMENT_FAILED if status == Experiment.Status.FAILED else Event.EXPERIMENT_FINISHED
    report = build_report(experiment, with_figures=False)
    message = notification_texts.experiment_ended(
        event=event,
        name=experiment.name,
        owner=experiment.created_by.get_username() if experiment.created_by else "(deleted user)",
        host=experiment.host.name,
        failed_runs=sum(run.state == Run.State.FAILED for run in runs),
        runs=len(runs),
        verdicts=verdict_lines(report.comparison),
        url=absolute_url(experiment.get_absolute_url()),
        answers=[f"{SIMULATED}{card.sentence}" if card.simulated else card.sentence for card in report.cards],
        recommendation=_study_recommendation(experiment),
    )
    notify(message, Subscription.objects.for_event(event, experiment_owner_id=experiment.created_by_id))


def _study_recommendation(experiment: Experiment) -> list[str]:
    """The recommendation of the study this experiment's round stopped, as its page words it (band by band,
    settled or not yet); empty for any other experiment."""
    round_ = StudyRound.objects.filter(experiment=experiment).select_related("study").first()
    if round_ is None:
        return []
    study = round_.study
    if study.is_running or study.studyround_set.filter(index__gt=round_.index).exists():
        return []
    return [f"Study {study.name}: {band['text']}" for band in study.recommendation]


# A headroom study's copies: what a better draft would be worth, never a result someone could ship.
SIMULATED = "(simulated acceptance: speed only) "


def verdict_lines(comparison: Comparison) -> list[str]:
    """One line per candidate and concurrency, as the experiment page's verdict table says it."""
    lines = []
    for row in comparison.rows:
        lead = SIMULATED if row.candidate in comparison.simulated else ""
        # The row's reasons but the two the line already says (the lead, the verdict).
        said = ("its accept length is simulated", "not settled")
        reasons = [r for r in comparison.reasons(row) if not r.startswith(said)]
        why = f" ({'; '.join(reasons)})" if reasons else ""
        lines.append(f"{lead}{row.candidate} at c={row.concurrency}: {comparison.said(row)}, {row.verdict}{why}")
    return lines


def notify_flag_raised(flag: Flag) -> None:
    message = notification_texts.flag_raised(
        event=Event.FLAG_RAISED,
        summary=f"{flag.direction} {flag.change:+.1%} on {flag.config.name} at c={flag.concurrency}",
        series=flag.profile_label,
        host=flag.host.name,
        message=flag.message,
        url=absolute_url(flag.get_absolute_url()),
    )
    notify(message, Subscription.objects.for_event(Event.FLAG_RAISED))


def notify_host_dirty(host: Host, reason: str) -> None:
    message = notification_texts.host_dirty(
        event=Event.HOST_DIRTY, host=host.name, reason=reason, url=absolute_url(reverse("host_detail", args=[host.pk]))
    )
    notify(message, Subscription.objects.for_event(Event.HOST_DIRTY))


def absolute_url(path: str) -> str:
    return settings.SPECDASH_BASE_URL.rstrip("/") + path


def notify(message: Message, subscriptions: Iterable[Subscription]) -> list[Delivery]:
    """A delivery per subscription, sent once the transaction commits."""
    deliveries = []
    for subscription in subscriptions:
        destination = subscription.destination()
        if subscription.channel == Subscription.Channel.BROWSER:
            destination = "open pages"
        elif not destination:
            continue  # a user's e-mail subscription without an address on their account: nothing to send to
        delivery = Delivery.objects.create(
            subscription=subscription,
            channel=subscription.channel,
            destination=destination,
            user=subscription.user,
            event=message.event,
            subject=message.subject,
            body=message.body,
            url=message.url,
        )
        if subscription.channel == Subscription.Channel.BROWSER:
            assert subscription.user_id is not None
            transaction.on_commit(functools.partial(_show_in_browser, delivery.pk, subscription.user_id, message))
        else:
            transaction.on_commit(functools.partial(_send_deliver_task, delivery.pk))
        deliveries.append(delivery)
    return deliveries


def _show_in_browser(delivery_id: int, user_id: int, message: Message) -> None:
    # Best effort by nature: only pages open now can show it; the delivery log says it was offered.
    broadcast.send_notification(user_id, message.browser_json())
    Delivery.objects.filter(pk=delivery_id).update(state=Delivery.State.SENT, attempts=1, sent_at=timezone.now())


def _send_deliver_task(delivery_id: int) -> None:
    try:
        dispatch.send_deliver_notification(delivery_id)
    except BrokerUnreachable as exc:
        Delivery.objects.filter(pk=delivery_id).update(
            state=Delivery.State.FAILED, last_error=f"Not queued: the broker was unreachable: {exc!r}"[:MAX_ERROR]
        )


# ---- delivering one message (the Celery task's work) ---------------------------------------------------------


def do_record_delivery_attempt(delivery: Delivery, *, error: str | None, last_attempt: bool) -> bool:
    """Record one attempt to send a pending e-mail or webhook delivery (`workers.delivery` sends it): sent when there
    is no `error`, else the error kept, and the delivery failed for good on its last attempt. True if it went out."""
    delivery.attempts += 1
    if error is not None:
        delivery.last_error = error[:MAX_ERROR]
        if last_attempt:
            delivery.state = Delivery.State.FAILED
        delivery.save(update_fields=["attempts", "last_error", "state"])
        log.warning("delivery %s: attempt %s failed: %s", delivery.pk, delivery.attempts, delivery.last_error)
        return False
    delivery.state = Delivery.State.SENT
    delivery.sent_at = timezone.now()
    delivery.save(update_fields=["attempts", "state", "sent_at"])
    return True
