"""A profiler trace of a run: one rank's file from SGLang's /start_profile at one concurrency, after the measured
cells, with its summary per speculative phase (analysis/trace_summary.py)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from .runs import Run


class ProfileTrace(models.Model):
    class State(models.TextChoices):
        STORED = "stored"  # fetched, summarised and kept
        REFUSED = "refused"  # over the size limit: not fetched
        FAILED = "failed"  # fetched but unreadable, or the profile never finished

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="profile_traces")
    concurrency = models.PositiveIntegerField()
    rank = models.PositiveIntegerField(default=0)
    file_name = models.CharField(max_length=255, blank=True)
    state = models.CharField(max_length=16, choices=State.choices)
    message = models.TextField(blank=True)
    size_bytes = models.BigIntegerField(default=0)
    steps = models.PositiveIntegerField(default=0, help_text="num_steps asked of /start_profile")
    summary = models.JSONField(default=dict, blank=True)
    # The gzipped trace as the server wrote it, bounded by SPECDASH_PROFILE_TRACE_MAX_BYTES. In the database, not on a
    # worker's disk: the web tier that serves the download may run on another machine.
    trace = models.BinaryField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run_id", "concurrency", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["run", "concurrency", "rank"], name="profile_trace_unique"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} c={self.concurrency} TP-{self.rank}: {self.state}"

    @property
    def has_trace(self) -> bool:
        return self.state == self.State.STORED and self.size_bytes > 0
