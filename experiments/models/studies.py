"""An auto-tuning study: a search space of speculative configs on one host, searched in rounds of experiments until
the best config per concurrency is known to the precision wanted, or the budget is spent.

Its trials are the runs of its rounds' experiments (the run machinery launches, measures and resumes them); the
study keeps only what those do not: the space, the budget, the precision, one saved config per point of the space,
and its rounds. Everything the search knows is re-read from the runs (`history`), so nothing lives in a worker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from experiments.rules import sweeps

from ..tuning import plan
from ..tuning.space import SearchSpace
from .configs import BenchmarkProfile, ServerConfig
from .experiments import Experiment
from .hosts import Host


class Study(models.Model):
    class State(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        CANCELLED = "cancelled"

    class StopReason(models.TextChoices):
        NONE = "", "still running"
        PRECISION = plan.PRECISION, "precision reached"
        BUDGET = plan.BUDGET, "budget spent"
        CANCELLED = plan.CANCELLED, "cancelled"

    name = models.CharField(max_length=200)
    host = models.ForeignKey(Host, on_delete=models.PROTECT)
    baseline = models.ForeignKey(ServerConfig, on_delete=models.PROTECT, related_name="+")
    profile = models.ForeignKey(BenchmarkProfile, on_delete=models.PROTECT)
    # The candidate the space varies, in the API's shape, and the value lists (`sweeps.Sweep` fields).
    base = models.JSONField()  # secrets as their mask: it names the space; the saved candidates launch
    space = models.JSONField()
    tolerance = models.FloatField(default=0.02, help_text="Within this share of the best, at 95% confidence.")
    max_launches = models.PositiveIntegerField()
    max_hours = models.FloatField(null=True, blank=True)
    round_size = models.PositiveSmallIntegerField(default=4)
    seed = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    stop_reason = models.CharField(max_length=16, choices=StopReason.choices, blank=True, default="")
    # The recommendation once stopped: [{low, high, config, text, best: [...]}] (`tuning.recommend.Band`).
    recommendation = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Why the next round waits (the quota's refusal): the beat plans it again each turn and clears this once queued.
    round_refusal = models.TextField(blank=True, default="", editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("study_detail", args=[self.pk])

    def can_be_managed_by(self, user: Any) -> bool:
        if user.has_perm("experiments.manage_any_experiment"):
            return True
        return self.created_by_id == user.pk and user.has_perm("experiments.change_experiment")

    @property
    def is_running(self) -> bool:
        return self.state == self.State.RUNNING

    def sweep(self) -> sweeps.Sweep:
        s = self.space
        return sweeps.Sweep(
            steps=tuple(s["steps"]),
            topk=tuple(s["topk"]),
            draft_tokens=tuple(s.get("draft_tokens") or ()),
            flags=tuple((name, tuple(values)) for name, values in s.get("flags") or []),
            env=tuple((name, tuple(values)) for name, values in s.get("env") or []),
            name_prefix=s.get("name_prefix") or "",
            methods=tuple(sweeps.MethodChoice(algorithm, draft) for algorithm, draft in s.get("methods") or []),
        )

    def search_space(self) -> SearchSpace:
        return SearchSpace.build(self.base, self.sweep())

    def plan_settings(self) -> plan.Settings:
        return plan.Settings(
            concurrency=tuple(int(c) for c in self.profile.concurrency),
            tolerance=self.tolerance,
            max_launches=self.max_launches,
            round_size=self.round_size,
            seed=self.seed,
        )

    def hours_spent(self) -> bool:
        return self.max_hours is not None and timezone.now() - self.created_at >= timedelta(hours=self.max_hours)

    def current_round(self) -> StudyRound | None:
        return self.studyround_set.select_related("experiment").order_by("-index").first()


class StudyConfig(models.Model):
    """One point of a study's space, as the saved config its rounds launch (and a recommendation links to)."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE)
    name = models.CharField(max_length=200)
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["study", "name"], name="study_config_name_unique")]

    def __str__(self) -> str:
        return f"{self.study_id}: {self.name}"


class StudyRound(models.Model):
    """One round of a study: an experiment of the baseline and the round's candidates, one launch each. The unique
    index is what makes advancing a study idempotent: a round is created once, whoever advances it."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE)
    index = models.PositiveIntegerField()
    experiment = models.OneToOneField(Experiment, on_delete=models.PROTECT)
    candidates = models.JSONField(default=list)  # the config names, as planned
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["index"]
        constraints = [models.UniqueConstraint(fields=["study", "index"], name="study_round_index_unique")]

    def __str__(self) -> str:
        return f"{self.study_id} round {self.index + 1}"
