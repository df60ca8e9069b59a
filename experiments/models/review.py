"""Team review: regression flags with their triage thread, and the pinned baseline per host and profile."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from .. import analysis
from .configs import ServerConfig
from .hosts import Host
from .runs import Run


class OfMetric:
    """A row about one history metric (`metric`, a key of analysis.METRICS): its unit and digits for the pages."""

    metric: str

    @property
    def unit(self) -> str:
        """The unit of its means ("tok/s", "tokens/step")."""
        return analysis.METRICS[self.metric].unit

    @property
    def digits(self) -> int:
        return analysis.METRICS[self.metric].digits


class FlagQuerySet(models.QuerySet["Flag"]):
    def of_series(self, host: Host | int, config_hash: str, profile_key: str) -> FlagQuerySet:
        """The flags holding one history series (any concurrency), also those led by another config of the host."""
        holding = Q(config_hash=config_hash) | Q(series__config_hash=config_hash)
        return self.filter(holding, host=host, profile_key=profile_key).distinct()


class Flag(OfMetric, models.Model):
    """A regression or anomaly found in a (host, config, profile, concurrency) series; the team triages it."""

    class Triage(models.TextChoices):
        UNTRIAGED = "untriaged"
        ACKNOWLEDGED = "acknowledged"
        INVALID = "invalid"
        FIXED = "fixed"

    OPEN_STATES = (Triage.UNTRIAGED, Triage.ACKNOWLEDGED)

    class Metric(models.TextChoices):
        # The keys of analysis.METRICS: what every series the flag holds measures (one metric per flag).
        THROUGHPUT = "throughput", "output throughput"
        ACCEPTANCE = "acceptance", "accept length"

    host = models.ForeignKey(Host, on_delete=models.CASCADE)
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    config_hash = models.CharField(max_length=64, db_index=True)
    profile_key = models.CharField(max_length=16)
    profile_label = models.CharField(max_length=200)
    concurrency = models.PositiveIntegerField()
    run = models.ForeignKey(Run, on_delete=models.CASCADE, help_text="The first run at the new level.")
    kind = models.CharField(max_length=16)  # "confirmed" (older flags: "lookback" | "change_point")
    metric = models.CharField(max_length=16, choices=Metric.choices, default=Metric.THROUGHPUT)
    direction = models.CharField(max_length=16)  # "regression" | "improvement"
    baseline_mean = models.FloatField()
    new_mean = models.FloatField()
    change = models.FloatField(help_text="Relative: -0.074 is 7.4% slower.")
    score = models.FloatField()
    message = models.TextField()
    # The interval of the change: the last result at the old level and the first at the new one, over every
    # series inside (on one host, the intersection: where a host-wide change must have happened).
    changed_after = models.DateTimeField(null=True, blank=True)
    changed_by = models.DateTimeField(null=True, blank=True)
    confirmed_by = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The confirming run."
    )
    triage = models.CharField(max_length=16, choices=Triage.choices, default=Triage.UNTRIAGED, db_index=True)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = FlagQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        what = "" if self.metric == self.Metric.THROUGHPUT else f" {self.get_metric_display()}"
        return f"{self.direction}{what} {self.change:+.1%} {self.config.name} c={self.concurrency} on {self.host.name}"

    def get_absolute_url(self) -> str:
        return reverse("flag_detail", args=[self.pk])

    @property
    def is_open(self) -> bool:
        return self.triage in self.OPEN_STATES


class FlagSeries(models.Model):
    """One series a flag holds: a concurrency of a config that moved at the flag's point, with its evidence."""

    flag = models.ForeignKey(Flag, on_delete=models.CASCADE, related_name="series")
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    config_hash = models.CharField(max_length=64)
    concurrency = models.PositiveIntegerField()
    category = models.CharField(max_length=200, blank=True, default="", help_text="A prompt category, or the cell.")
    change_run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+", help_text="First at the new level.")
    last_before_run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    confirmed_by = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    suspicion = models.ForeignKey("SuspectSeries", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    baseline_mean = models.FloatField()
    new_mean = models.FloatField(help_text="Mean of the suspected values and those that confirmed them.")
    change = models.FloatField()
    score = models.FloatField()

    class Meta:
        ordering = ["flag_id", "config_hash", "concurrency", "category"]

    def __str__(self) -> str:
        category = f" ({self.category})" if self.category else ""
        return f"{self.config.name} c={self.concurrency}{category} in flag {self.flag_id}"


class FlagComment(models.Model):
    flag = models.ForeignKey(Flag, on_delete=models.CASCADE)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"comment {self.pk} on flag {self.flag_id}"


class PinnedBaselineQuerySet(models.QuerySet["PinnedBaseline"]):
    def of_series(self, host: Host | int, profile_key: str) -> PinnedBaselineQuerySet:
        """The baseline pinned on `host` for `profile_key` (at most one), with its config."""
        return self.filter(host=host, profile_key=profile_key).select_related("config")


class PinnedBaseline(models.Model):
    """The baseline config a team compares against on a host for a kind of request; its history is watched."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE)
    profile_key = models.CharField(max_length=16)
    profile_label = models.CharField(max_length=200)
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    pinned_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    pinned_at = models.DateTimeField(default=timezone.now)

    objects = PinnedBaselineQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host", "profile_key"], name="one_pinned_baseline")]

    def __str__(self) -> str:
        return f"{self.config.name} pinned on {self.host.name} ({self.profile_label})"
