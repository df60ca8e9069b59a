"""Auto-tuning studies: start one (host, baseline, the space as a sweep, profile, budget, precision), read its
trials, best config per concurrency and recommendation, cancel it."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Status
from ninja.errors import HttpError

from experiments.serializers import study_json

from ..actions import dispatch
from ..actions.audit import Actor
from ..actions.studies import do_cancel_study, do_confirm_recommendation, do_start_study
from ..forms.studies import StudySubmission
from ..models import Study
from ..reads.bakeoff import study_bakeoff
from ..reads.draft_report import study_draft_report
from ..serializers.bakeoff import bakeoff_json
from ..serializers.draft_report import draft_report_json
from .base import api, config_data, host_name, profile_data, require
from .bodies import StudyIn
from .refusals import documented, refused, responses, status_of
from .sweeps import sweep_form


@api.post("/studies", response=responses(201, 403, 404, 409, 429), openapi_extra=documented(403, 404, 409, 429))
def create_study(request: HttpRequest, payload: StudyIn):
    require(request, "experiments.add_experiment")
    submission = StudySubmission(
        {"name": payload.name, "host": host_name(payload.host)},
        config_data(payload.baseline, "baseline"),
        profile_data(payload.profile),
        {
            "max_launches": payload.budget.launches,
            "max_hours": payload.budget.hours,
            "tolerance": payload.precision.within,
            "confidence": payload.precision.confidence,
            "round_size": payload.round_size,
            "seed": payload.seed,
        },
        sweep=sweep_form(payload.sweep),
    )
    if not submission.is_valid():
        return refused("invalid study", submission.errors, status_of(submission.every_form()))
    study = do_start_study(actor=Actor.of(request), **submission.study_fields())  # 429 past a quota (base.py)
    return Status(201, {"id": study.pk, "url": study.get_absolute_url(), "state": study.state})


@api.get("/studies/{study_id}")
def get_study(request: HttpRequest, study_id: int):
    require(request, "experiments.view_experiment")
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    return study_json(study)


@api.get("/studies/{study_id}/bakeoff")
def get_study_bakeoff(request: HttpRequest, study_id: int):
    """The study's methods side by side per concurrency: its rows and recommendation grouped by method."""
    require(request, "experiments.view_experiment")
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    return bakeoff_json(study_bakeoff(study))


@api.get("/studies/{study_id}/drafts")
def get_study_drafts(request: HttpRequest, study_id: int):
    """The draft's report card of the study: its rows and recommendation per draft checkpoint, beside the training
    figures (as GET /api/experiments/{id}/drafts)."""
    require(request, "experiments.view_experiment")
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    directories, why = dispatch.read_draft_training(
        study.host, may_ask=request.user.has_perm("experiments.add_experiment")
    )
    return draft_report_json(study_draft_report(study, directories, why))


@api.post("/studies/{study_id}/cancel", response={200: dict, 403: dict})
def cancel_study(request: HttpRequest, study_id: int):
    study = get_object_or_404(Study, pk=study_id)
    if not study.can_be_managed_by(request.user):
        raise HttpError(403, "Only the study's owner or a maintainer may do this.")
    cancelled = do_cancel_study(study, Actor.of(request))
    study.refresh_from_db()
    return {"cancelled": cancelled, "state": study.state, "stop_reason": study.stop_reason}


@api.post("/studies/{study_id}/confirm", response=responses(201, 429), openapi_extra=documented(429))
def confirm_study_recommendation(request: HttpRequest, study_id: int, band: int = 0):
    """A confirming experiment of the study's `band`-th recommendation against its baseline (3 launches); 429 past
    a quota (base.py)."""
    require(request, "experiments.add_experiment")
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    if not 0 <= band < len(study.recommendation):
        return Status(404, {"detail": f"band: the study has {len(study.recommendation)} recommendations"})
    experiment = do_confirm_recommendation(study, band, actor=Actor.of(request))
    return Status(201, {"id": experiment.pk, "url": experiment.get_absolute_url()})
