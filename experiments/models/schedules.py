"""An adaptive speculation schedule: the `--speculative-adaptive-config` JSON built from a study's (or an
experiment's) per-band winners, as a versioned artefact that can be downloaded, diffed against its previous version
and launched (a `ServerConfig` that points at it), and the experiment that verifies it.

The JSON is written by `analysis.adaptive_schedule` from the winners' numbers alone, never from text a user typed;
the worker ships it to the host as a file (`workers/run/adaptive.py`) and names that file on the command line.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from .experiments import Experiment
from .studies import Study


def schedule_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class AdaptiveSchedule(models.Model):
    # Where the bands came from: a finished study, or an experiment with several candidates and concurrencies.
    study = models.ForeignKey(Study, null=True, blank=True, on_delete=models.CASCADE, related_name="schedules")
    experiment = models.ForeignKey(
        Experiment, null=True, blank=True, on_delete=models.CASCADE, related_name="adaptive_schedules"
    )
    version = models.PositiveIntegerField()
    config_json = models.TextField()
    digest = models.CharField(max_length=64, editable=False)
    # What the JSON cannot express (a topk > 1 winner, another algorithm or draft, other launch settings).
    notes = models.JSONField(default=list, blank=True)
    # The bands it was built from: [{low, high, config, config_id, steps}] (config "baseline": no speculation).
    bands = models.JSONField(default=list)
    # The share of the winner the adaptive server may lose and still match it (the source study's precision).
    tolerance = models.FloatField(default=0.02)
    verification = models.ForeignKey(
        Experiment, null=True, blank=True, on_delete=models.SET_NULL, related_name="verified_schedules"
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(study__isnull=False, experiment__isnull=True)
                | models.Q(study__isnull=True, experiment__isnull=False),
                name="schedule_has_one_source",
            ),
            models.UniqueConstraint(fields=["study", "version"], name="schedule_study_version_unique"),
            models.UniqueConstraint(fields=["experiment", "version"], name="schedule_experiment_version_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.source_name} · schedule v{self.version}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.digest = schedule_digest(self.config_json)
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        return reverse("schedule_detail", args=[self.pk])

    @property
    def source(self) -> Study | Experiment:
        source = self.study if self.study_id is not None else self.experiment
        assert source is not None  # the check constraint
        return source

    @property
    def source_name(self) -> str:
        return self.source.name

    @property
    def short_digest(self) -> str:
        return self.digest[:10]

    def previous(self) -> AdaptiveSchedule | None:
        """The version before this one, of the same study or experiment."""
        source = {"study": self.study_id} if self.study_id is not None else {"experiment": self.experiment_id}
        siblings = AdaptiveSchedule.objects.filter(**source)
        return siblings.filter(version__lt=self.version).order_by("-version").first()
