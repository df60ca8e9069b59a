"""An acceptance headroom study: what a better draft would be worth on this host, before anyone trains one.

It takes one speculative config of a measured experiment and queues one experiment: the config as it is, copies of
it with the accept length simulated (`SGLANG_SIMULATE_ACC_LEN`, one copy per length), and the source's baseline,
interleaved. Everything it shows is read from that experiment's runs (`reads/headroom.py`); the study keeps only
what they do not: where it came from, the config it varies and the lengths it swept.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from .configs import ServerConfig
from .experiments import Experiment


class HeadroomStudy(models.Model):
    source = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="headroom_studies")
    # The real config (steps / topk / draft tokens as chosen); the simulated copies differ only in their env.
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT, related_name="+")
    accept_lengths = models.JSONField(default=list)  # the simulated accept lengths, ascending
    experiment = models.OneToOneField(Experiment, on_delete=models.PROTECT, related_name="headroom")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "headroom studies"

    def __str__(self) -> str:
        return f"headroom of {self.config.name} ({self.experiment_id})"

    def get_absolute_url(self) -> str:
        return reverse("headroom_detail", args=[self.experiment_id])
