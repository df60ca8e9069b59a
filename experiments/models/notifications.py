"""Notifications: who wants to hear about what (a subscription), and every message sent for it (a delivery)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Event(models.TextChoices):
    EXPERIMENT_FINISHED = "experiment_finished", "Experiment finished"
    EXPERIMENT_FAILED = "experiment_failed", "Experiment failed"
    FLAG_RAISED = "flag_raised", "Regression flag raised"
    HOST_DIRTY = "host_dirty", "Host left dirty"


class SubscriptionQuerySet(models.QuerySet["Subscription"]):
    def visible_to(self, user) -> SubscriptionQuerySet:
        """A user's own subscriptions and the team's (everyone may see where the team is told)."""
        return self.filter(Q(user=user) | Q(user__isnull=True))

    def for_event(self, event: str, *, experiment_owner_id: int | None = None) -> list[Subscription]:
        """Who hears of `event`: of an experiment's events, a "my experiments" subscription only for its owner.
        (Subscriptions are few; the event list is matched here, as SQLite has no JSON containment.)"""
        experiment_event = event in (Event.EXPERIMENT_FINISHED, Event.EXPERIMENT_FAILED)
        return [
            subscription
            for subscription in self.select_related("user")
            if event in subscription.events
            and not (experiment_event and subscription.only_mine and subscription.user_id != experiment_owner_id)
        ]


class Subscription(models.Model):
    """Tell one user (or, with no user, the team) of some events, by one channel."""

    class Channel(models.TextChoices):
        EMAIL = "email", "E-mail"
        WEBHOOK = "webhook", "Webhook (Slack-compatible JSON)"
        BROWSER = "browser", "Browser notification"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        help_text="Empty: a team subscription, managed by admins.",
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    # An e-mail address (team e-mail) or a webhook URL; a user's e-mail goes to their account's address.
    target = models.CharField(max_length=500, blank=True)
    events = models.JSONField(default=list)
    only_mine = models.BooleanField(default=False, help_text="Of experiment events, only those of my experiments.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = SubscriptionQuerySet.as_manager()

    class Meta:
        ordering = ["user_id", "id"]
        permissions = [("manage_team_subscriptions", "Can manage the team's notification subscriptions")]

    def __str__(self) -> str:
        who = self.user.get_username() if self.user else "team"
        return f"{who}: {self.get_channel_display()} on {', '.join(self.events)}"

    @property
    def is_team(self) -> bool:
        return self.user_id is None

    def destination(self) -> str:
        """Where a message goes: the target, or for a user's e-mail their account's address."""
        if self.channel == self.Channel.EMAIL and self.user is not None:
            return self.user.email
        return self.target

    def can_be_managed_by(self, user) -> bool:
        if self.is_team:
            return user.has_perm("experiments.manage_team_subscriptions")
        return self.user_id == user.pk

    def event_labels(self) -> list[str]:
        labels = dict(Event.choices)
        return [str(labels.get(event, event)) for event in self.events]


class DeliveryQuerySet(models.QuerySet["Delivery"]):
    def visible_to(self, user) -> DeliveryQuerySet:
        """The delivery log a user reads: their own messages; with the team permission everyone's."""
        if user.has_perm("experiments.manage_team_subscriptions"):
            return self.all()
        return self.filter(user=user)


class Delivery(models.Model):
    """One message for one subscription: queued, then sent or failed after its retries; the delivery log."""

    class State(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    subscription = models.ForeignKey(Subscription, null=True, on_delete=models.SET_NULL)
    # Kept on the delivery: the log must read the same after its subscription is deleted.
    channel = models.CharField(max_length=16, choices=Subscription.Channel.choices)
    destination = models.CharField(max_length=500)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE)
    event = models.CharField(max_length=32, choices=Event.choices)
    subject = models.CharField(max_length=300)
    body = models.TextField()
    url = models.CharField(max_length=500, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.get_event_display()} by {self.channel} to {self.destination}: {self.state}"
