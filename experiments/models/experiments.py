"""An experiment: a baseline against candidates, on one host, under one profile."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from .configs import BenchmarkProfile, ServerConfig
from .hosts import Host

if TYPE_CHECKING:
    from .runs import Run


class Experiment(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"

    name = models.CharField(max_length=200)
    host = models.ForeignKey(Host, on_delete=models.PROTECT)
    baseline = models.ForeignKey(ServerConfig, on_delete=models.PROTECT, related_name="+")
    candidates = models.ManyToManyField(ServerConfig, through="Candidate", related_name="+")
    profile = models.ForeignKey(BenchmarkProfile, on_delete=models.PROTECT)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("manage_any_experiment", "Can cancel and re-run anyone's experiments")]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("experiment_detail", args=[self.pk])

    def can_be_managed_by(self, user) -> bool:
        """Cancel and re-run: a member on their own experiments, a maintainer on anyone's."""
        if user.has_perm("experiments.manage_any_experiment"):
            return True
        return self.created_by_id == user.pk and user.has_perm("experiments.change_experiment")

    def ordered_candidates(self) -> list[ServerConfig]:
        return [c.config for c in self.candidate_set.select_related("config").order_by("position")]

    def status_of(self, runs: list[Run]) -> str:
        """The experiment's status from its runs (given, so a page that already has them saves a query)."""
        from .runs import Run  # runs.py imports this module

        if not runs or all(r.state == Run.State.QUEUED for r in runs):
            return self.Status.QUEUED
        if any(not r.is_finished for r in runs):
            return self.Status.RUNNING
        if any(r.state == Run.State.FAILED for r in runs):
            return self.Status.FAILED
        return self.Status.FINISHED

    @property
    def status(self) -> str:
        return self.status_of(list(self.run_set.all()))


class Candidate(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE)
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    position = models.PositiveIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["experiment", "position"], name="candidate_position_unique")]

    def __str__(self) -> str:
        return f"{self.experiment_id}#{self.position}: {self.config_id}"
