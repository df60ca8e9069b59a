"""Adaptive speculation schedules: build one from a finished study or an experiment (a button), its page, and its
JSON as a file."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from experiments.reads.schedules import schedule_view
from experiments.serializers.schedules import vllm_k_schedule_json

from ..actions.audit import Actor
from ..actions.quotas import QuotaExceeded
from ..actions.schedules import ScheduleRefused, do_build_experiment_schedule, do_build_study_schedule
from ..models import AdaptiveSchedule, Experiment, Study
from .access import requires


@require_POST
@requires("experiments.add_experiment")
def build_study_schedule(request: HttpRequest, study_id: int) -> HttpResponse:
    study = get_object_or_404(Study, pk=study_id)
    return _built(request, study, lambda: do_build_study_schedule(study, actor=Actor.of(request)))


@require_POST
@requires("experiments.add_experiment")
def build_experiment_schedule(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    return _built(request, experiment, lambda: do_build_experiment_schedule(experiment, actor=Actor.of(request)))


def _built(request: HttpRequest, source: Study | Experiment, build: Callable[[], AdaptiveSchedule]) -> HttpResponse:
    try:
        schedule = build()
    except (ScheduleRefused, QuotaExceeded) as exc:
        messages.error(request, f"No schedule built: {exc}")
        return redirect(source)
    messages.success(request, f"Schedule v{schedule.version} built; its verification experiment is queued.")
    return redirect(schedule)


def _schedule(schedule_id: int) -> AdaptiveSchedule:
    return get_object_or_404(
        AdaptiveSchedule.objects.select_related("study", "experiment", "verification__profile", "created_by"),
        pk=schedule_id,
    )


@requires("experiments.view_experiment")
def schedule_detail(request: HttpRequest, schedule_id: int) -> HttpResponse:
    view = schedule_view(_schedule(schedule_id))
    return render(request, "experiments/schedule_detail.html", {"view": view, "schedule": view.schedule})


@requires("experiments.view_experiment")
def schedule_download(request: HttpRequest, schedule_id: int) -> HttpResponse:
    """The file to pass to `--speculative-adaptive-config`, as SGLang reads it."""
    schedule = get_object_or_404(AdaptiveSchedule.objects.only("config_json", "version", "study_id"), pk=schedule_id)
    response = HttpResponse(schedule.config_json, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="adaptive-schedule-{schedule.pk}-v{schedule.version}.json"'
    return response


@requires("experiments.view_experiment")
def schedule_vllm_download(request: HttpRequest, schedule_id: int) -> HttpResponse:
    """The same bands as vLLM takes them: the `num_speculative_tokens_per_batch_size` key to merge into a vLLM
    config's `--speculative-config` (0.33+), with what it had to guess."""
    schedule = get_object_or_404(AdaptiveSchedule.objects.only("bands", "version"), pk=schedule_id)
    response = JsonResponse(vllm_k_schedule_json(schedule), json_dumps_params={"indent": 2})
    name = f"vllm-k-schedule-{schedule.pk}-v{schedule.version}.json"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
