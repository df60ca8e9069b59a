"""An experiment: a baseline against candidates, on one host, under one profile."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, Min, Q, Sum
from django.urls import reverse
from django.utils import timezone

from ..analysis.equivalence import Equivalence
from ..formats.durations import in_words, span_in_words
from .configs import BenchmarkProfile, ServerConfig
from .hosts import Host
from .run_states import TERMINAL_STATES, RunState, StatedRun

# Tags: short lowercase words a team filters the experiments table by. Allowlisted characters only, so a tag is
# safe in a URL, a CSS-free chip and a query string as it is; bounded in number and length.
TAG_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,31}")
MAX_TAGS = 8
NOTES_MAX_LENGTH = 20_000


# An experiment whose calendar span is more than this many times its runs' own time was launched spread out (a
# nightly series, re-runs days later): its span is no duration of anything, so it is not called one.
SPREAD_OUT = 2


@dataclass(frozen=True)
class TimeTaken:
    """How long an experiment took: its calendar span (the first run's start to the last one's end), the sum of
    its runs' own durations, and the runs that ran."""

    span: timedelta
    run_time: timedelta
    launches: int

    @property
    def is_spread_out(self) -> bool:
        return self.launches > 1 and self.span > SPREAD_OUT * self.run_time

    def __str__(self) -> str:
        """ "1 h 5 min", or for launches spread out "22 launches over 13 days (5 h 30 min of runs)"."""
        if self.is_spread_out:
            span = span_in_words(self.span.total_seconds())
            return f"{self.launches} launches over {span} ({in_words(self.run_time.total_seconds())} of runs)"
        return in_words(self.span.total_seconds())


class ExperimentQuerySet(models.QuerySet["Experiment"]):
    def scheduled_due(self, now: datetime) -> ExperimentQuerySet:
        """Scheduled experiments whose next launch time has come."""
        return self.exclude(schedule="").filter(next_scheduled_at__lte=now)

    def with_time_taken(self) -> ExperimentQuerySet:
        """Annotated with what `Experiment.time_taken` reads, computed by the database (a table sorts by it)."""
        ran = Q(run__started_at__isnull=False, run__finished_at__isnull=False)
        own_time = ExpressionWrapper(F("run__finished_at") - F("run__started_at"), output_field=DurationField())
        return self.annotate(
            first_started_at=Min("run__started_at"),
            last_finished_at=Max("run__finished_at"),
            run_time=Sum(own_time, filter=ran),
            launches_ran=Count("run", filter=ran),
            unfinished_runs=Count("run", filter=~Q(run__state__in=TERMINAL_STATES)),
        )


class Experiment(models.Model):
    class Schedule(models.TextChoices):
        NONE = "", "not scheduled"
        NIGHTLY = "nightly", "every night"
        WEEKLY = "weekly", "every week"

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
    # Off: when a round's baseline run fails or is cancelled, that round's candidate runs are skipped (there is
    # nothing to compare them with). On: they run anyway (to see whether a candidate launches at all).
    run_candidates_without_baseline = models.BooleanField(default=False)
    # Set by the worker that checked every config of the experiment on the host before its first launch.
    configs_checked_at = models.DateTimeField(null=True, blank=True)
    schedule = models.CharField(max_length=16, choices=Schedule.choices, blank=True, default="")
    schedule_hour = models.PositiveSmallIntegerField(
        default=2, validators=[MaxValueValidator(23)], help_text="Hour of day (UTC) of a scheduled launch."
    )
    next_scheduled_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # Why the beat's last scheduled round was not queued (the quota's refusal, and when the round was due), shown
    # beside the cadence to whoever reads the experiment; cleared by the next round queued or a new cadence.
    schedule_refusal = models.TextField(blank=True, default="", editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    # When its subscribers were told it ended; a re-run's runs come later, so its end is told again.
    end_notified_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Space-separated, each matching TAG_PATTERN (the notes form checks); a plain column filters on any database.
    tags = models.CharField(max_length=300, blank=True, default="")
    # Markdown, rendered through an allowlist sanitiser (`experiments/formats/markdown.py`): other users read it.
    notes = models.TextField(blank=True, default="")

    objects = ExperimentQuerySet.as_manager()

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

    @property
    def tag_list(self) -> list[str]:
        return self.tags.split()

    def ordered_candidates(self) -> list[ServerConfig]:
        return [c.config for c in self.candidate_set.select_related("config").order_by("position")]

    def status_of(self, runs: Sequence[StatedRun]) -> str:
        """The experiment's status from its runs (given, so a page that already has them saves a query)."""
        if not runs or all(r.state == RunState.QUEUED for r in runs):
            return self.Status.QUEUED
        if any(not r.is_finished for r in runs):
            return self.Status.RUNNING
        if any(r.state == RunState.FAILED for r in runs):
            return self.Status.FAILED
        return self.Status.FINISHED

    def next_schedule_time(self, now: datetime) -> datetime | None:
        """When the schedule launches next after `now`: the first `schedule_hour` (UTC) to come for a new
        schedule, else one period after the last planned time. Times missed while no beat ran are not caught up
        one by one: one launch, then back on the timetable."""
        if not self.schedule:
            return None
        period = timedelta(days=7 if self.schedule == self.Schedule.WEEKLY else 1)
        at = self.next_scheduled_at
        if at is None:
            at = now.astimezone(UTC).replace(hour=self.schedule_hour, minute=0, second=0, microsecond=0)
            period = timedelta(days=1)  # the first launch: the next time that hour comes round
        while at <= now:
            at += period
        return at

    @property
    def status(self) -> str:
        return self.status_of(list(self.run_set.all()))

    @property
    def time_taken(self) -> TimeTaken | None:
        """How long it took, once every run ended (None before, or when none ran); from the annotations of
        `ExperimentQuerySet.with_time_taken` where the row has them (a table), else one query."""
        if not hasattr(self, "launches_ran"):
            row = type(self).objects.filter(pk=self.pk).with_time_taken().get()
            for name in ("first_started_at", "last_finished_at", "run_time", "launches_ran", "unfinished_runs"):
                setattr(self, name, getattr(row, name))
        values = self.__dict__
        if values["unfinished_runs"] or not values["launches_ran"] or values["first_started_at"] is None:
            return None
        span = values["last_finished_at"] - values["first_started_at"]
        return TimeTaken(span, values["run_time"] or timedelta(0), values["launches_ran"])


class Candidate(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE)
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    position = models.PositiveIntegerField()
    # The equivalence gate as of the experiment's latest succeeded run (actions.prompts.do_record_equivalence):
    # its summary, and whether the outputs differ (lists read it without reading any output).
    equivalence = models.JSONField(default=dict, blank=True, editable=False)
    outputs_differ = models.BooleanField(default=False, editable=False)

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["experiment", "position"], name="candidate_position_unique")]

    def __str__(self) -> str:
        return f"{self.experiment_id}#{self.position}: {self.config_id}"

    @property
    def outputs_match(self) -> bool:
        """Its outputs were compared with the baseline's and match (`outputs_differ` is the other answer; neither:
        not compared)."""
        return bool(self.equivalence) and not self.outputs_differ

    @property
    def gate(self) -> Equivalence | None:
        """The stored equivalence gate, None while no outputs were compared: the one every comparison reads."""
        return Equivalence.from_json(self.equivalence) if self.equivalence else None
