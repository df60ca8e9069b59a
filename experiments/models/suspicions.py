"""Suspected changes of level waiting for (or decided by) their confirming runs; see `analysis.confirmation`."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from .. import analysis
from .configs import ServerConfig
from .experiments import Experiment
from .hosts import Host
from .review import Flag, OfMetric
from .runs import Run


class SuspicionQuerySet(models.QuerySet["Suspicion"]):
    def of_series(self, host: Host | int, config_hash: str, profile_key: str) -> SuspicionQuerySet:
        return self.filter(host=host, config_hash=config_hash, profile_key=profile_key)

    def awaiting(self) -> SuspicionQuerySet:
        return self.filter(state=Suspicion.State.AWAITING)


class Suspicion(models.Model):
    """The check of one result suspected its series moved (one row per suspecting run, every concurrency of the
    config inside); confirming runs of its experiment are queued, and only what they support becomes a flag."""

    class State(models.TextChoices):
        AWAITING = "awaiting", "awaiting confirmation"
        CONFIRMED = "confirmed"
        DISMISSED = "dismissed", "not confirmed"

    host = models.ForeignKey(Host, on_delete=models.CASCADE)
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, help_text="Re-run to confirm.")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+", help_text="The result that raised it.")
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    config_hash = models.CharField(max_length=64, db_index=True)
    profile_key = models.CharField(max_length=16)
    profile_label = models.CharField(max_length=200)
    state = models.CharField(max_length=16, choices=State.choices, default=State.AWAITING, db_index=True)
    confirmations = models.PositiveSmallIntegerField(default=0, help_text="Confirming launches queued.")
    flag = models.ForeignKey("Flag", null=True, blank=True, on_delete=models.SET_NULL, related_name="suspicions")
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)

    objects = SuspicionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"suspicion {self.pk}: {self.config.name} on {self.host.name} ({self.get_state_display()})"

    @property
    def can_queue_confirmation(self) -> bool:
        """Another confirming launch is due: still undecided, under the cap, and no run of the config still to
        come in its experiment (a confirming one, or a launch queued anyway: its result will weigh the
        suspicion for free)."""
        to_come = Run.objects.filter(experiment_id=self.experiment_id, config__content_hash=self.config_hash)
        return (
            self.state == self.State.AWAITING
            and self.confirmations < analysis.MAX_CONFIRMATIONS
            and not to_come.exclude(state__in=Run.TERMINAL_STATES).exists()
        )


class SuspectSeries(OfMetric, models.Model):
    """One concurrency of a suspicion: the hypotheses its sequential test weighs, and the values it has seen."""

    class State(models.TextChoices):
        AWAITING = "awaiting", "awaiting confirmation"
        CONFIRMED = "confirmed"
        DISMISSED = "dismissed", "not confirmed"

    suspicion = models.ForeignKey(Suspicion, on_delete=models.CASCADE, related_name="series")
    # One suspicion holds every series its run moved, of either metric: its confirming launch measures them all.
    metric = models.CharField(max_length=16, choices=Flag.Metric.choices, default=Flag.Metric.THROUGHPUT)
    concurrency = models.PositiveIntegerField()
    # A prompt category's acceptance (from its accepted-drafts histogram), or "" for the whole cell.
    category = models.CharField(max_length=200, blank=True, default="")
    change_run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+", help_text="First run suspected.")
    last_before_run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+", help_text="Last run before.")
    direction = models.CharField(max_length=16)
    baseline_mean = models.FloatField()
    suspected_mean = models.FloatField()
    change = models.FloatField()
    score = models.FloatField()
    hypotheses = models.JSONField(help_text="analysis.SuspectedChange fields: H0 and H1 of the sequential test.")
    after = models.JSONField(default=list, help_text="[[run id, value]] that arrived after the suspicion.")
    llr = models.FloatField(default=0.0)
    state = models.CharField(max_length=16, choices=State.choices, default=State.AWAITING)
    decided_by = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["suspicion_id", "metric", "concurrency", "category"]

    def __str__(self) -> str:
        what = "" if self.metric == Flag.Metric.THROUGHPUT else f"{self.get_metric_display()} "
        category = f" ({self.category})" if self.category else ""
        return f"{what}c={self.concurrency}{category} of suspicion {self.suspicion_id}"

    def test(self) -> analysis.SuspectedChange:
        return analysis.SuspectedChange(**self.hypotheses)

    @property
    def after_mean(self) -> float | None:
        return sum(v for _, v in self.after) / len(self.after) if self.after else None
