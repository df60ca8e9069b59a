"""What one member may take of the shared hosts: an admin's values, each blank for the deployment's default."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from .hosts import MAX_QUOTA_GPU_HOURS, MAX_QUOTA_LAUNCHES


class MemberQuota(models.Model):
    """One row per member an admin set a quota for; a member without one has the SPECDASH_QUOTA_* defaults."""

    FIELDS = ("launches_queued", "gpu_hours_per_day")

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="quota")
    launches_queued = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(MAX_QUOTA_LAUNCHES)],
        help_text="Launches queued or running at once (blank: SPECDASH_QUOTA_LAUNCHES_PER_USER).",
    )
    gpu_hours_per_day = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(MAX_QUOTA_GPU_HOURS)],
        help_text="GPU-hours in 24 h (blank: SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY).",
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["user_id"]

    def __str__(self) -> str:
        return f"quota of {self.user}"

    @property
    def launch_limit(self) -> int:
        if self.launches_queued is not None:
            return self.launches_queued
        return int(settings.SPECDASH_QUOTA_LAUNCHES_PER_USER)

    @property
    def gpu_hours_limit(self) -> float:
        if self.gpu_hours_per_day is not None:
            return self.gpu_hours_per_day
        return float(settings.SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY)

    @classmethod
    def of(cls, user) -> MemberQuota:
        """The member's row, or an unsaved one of defaults (the user is not saved into it: nothing is written)."""
        return cls.objects.filter(user=user).first() or cls(user_id=user.pk)
