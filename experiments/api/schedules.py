"""Adaptive speculation schedules: build one from a finished study or an experiment (and queue its verification),
read one with its verdict per concurrency."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Status

from experiments.reads.schedules import schedule_view
from experiments.serializers import schedule_json

from ..actions.audit import Actor
from ..actions.schedules import ScheduleRefused, do_build_experiment_schedule, do_build_study_schedule
from ..models import AdaptiveSchedule, Experiment, Study
from .base import api, require
from .refusals import documented, refused, responses


def _built(build: Callable[[], AdaptiveSchedule]) -> Status:
    try:
        schedule = build()
    except ScheduleRefused as exc:
        return refused("no schedule", {"source": [str(exc)]}, 409)
    verification = schedule.verification
    return Status(
        201,
        {
            "id": schedule.pk,
            "url": schedule.get_absolute_url(),
            "version": schedule.version,
            "digest": schedule.digest,
            "notes": schedule.notes,
            "verification": None if verification is None else {"id": verification.pk,
                                                                "url": verification.get_absolute_url()},
        },
    )  # fmt: skip


@api.post("/studies/{study_id}/schedule", response=responses(201, 409, 429), openapi_extra=documented(409, 429))
def build_study_schedule(request: HttpRequest, study_id: int):
    """The next adaptive schedule of a finished study, from its recommendation, and its verification (queued)."""
    require(request, "experiments.add_experiment")
    study = get_object_or_404(Study, pk=study_id)
    return _built(lambda: do_build_study_schedule(study, actor=Actor.of(request)))


@api.post(
    "/experiments/{experiment_id}/adaptive-schedule",
    response=responses(201, 409, 429),
    openapi_extra=documented(409, 429),
)
def build_experiment_schedule(request: HttpRequest, experiment_id: int):
    """The next adaptive schedule of an experiment (the fastest candidate per concurrency), and its verification."""
    require(request, "experiments.add_experiment")
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    return _built(lambda: do_build_experiment_schedule(experiment, actor=Actor.of(request)))


@api.get("/schedules/{schedule_id}")
def get_schedule(request: HttpRequest, schedule_id: int):
    require(request, "experiments.view_experiment")
    schedule = get_object_or_404(
        AdaptiveSchedule.objects.select_related("study", "experiment", "verification__profile", "created_by"),
        pk=schedule_id,
    )
    return schedule_json(schedule_view(schedule, with_figure=False))
