"""Auto-tuning studies: start one (host, baseline, the space as a sweep, profile, budget, precision), read its
trials, best config per concurrency and recommendation, cancel it."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Schema, Status
from ninja.errors import HttpError

from experiments.reads.study_report import study_json

from ..actions.audit import Actor
from ..actions.studies import do_cancel_study, do_confirm_recommendation, do_start_study
from ..forms.studies import StudySubmission
from ..models import Study
from .base import api, config_data, host_name, profile_data, require
from .sweeps import sweep_form


class StudyIn(Schema):
    name: str
    host: str | int
    baseline: dict[str, Any] | int
    profile: dict[str, Any] | int
    # The search space: the value lists of a sweep and the candidate they vary (`base`), as POST /api/experiments.
    sweep: dict[str, Any]
    budget: dict[str, Any]  # {"launches": 40} and/or {"hours": 6}
    precision: dict[str, Any] = {}  # {"within": 0.02, "confidence": 0.95}
    round_size: int = 4
    seed: int = 0


@api.post("/studies", response={201: dict, 422: dict})
def create_study(request: HttpRequest, payload: StudyIn):
    require(request, "experiments.add_experiment")
    errors = {}
    for field, given, known in (
        ("budget", payload.budget, {"launches", "hours"}),
        ("precision", payload.precision, {"within", "confidence"}),
    ):
        unknown = ", ".join(sorted(str(key) for key in set(given) - known))[:200]
        if unknown:
            errors[field] = [f"Unknown keys {unknown} (it takes {', '.join(sorted(known))})."]
    if errors:
        return Status(422, {"detail": "invalid study", "errors": errors})
    submission = StudySubmission(
        {"name": payload.name, "host": host_name(payload.host)},
        config_data(payload.baseline, "baseline"),
        profile_data(payload.profile),
        {
            "max_launches": payload.budget.get("launches"),
            "max_hours": payload.budget.get("hours"),
            "tolerance": payload.precision.get("within", 0.02),
            "confidence": payload.precision.get("confidence", 0.95),
            "round_size": payload.round_size,
            "seed": payload.seed,
        },
        sweep=sweep_form(payload.sweep),
    )
    if not submission.is_valid():
        return Status(422, {"detail": "invalid study", "errors": submission.errors})
    study = do_start_study(actor=Actor.of(request), **submission.study_fields())
    return Status(201, {"id": study.pk, "url": study.get_absolute_url(), "state": study.state})


@api.get("/studies/{study_id}")
def get_study(request: HttpRequest, study_id: int):
    require(request, "experiments.view_experiment")
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    return study_json(study)


@api.post("/studies/{study_id}/cancel", response={200: dict, 403: dict})
def cancel_study(request: HttpRequest, study_id: int):
    study = get_object_or_404(Study, pk=study_id)
    if not study.can_be_managed_by(request.user):
        raise HttpError(403, "Only the study's owner or a maintainer may do this.")
    cancelled = do_cancel_study(study, Actor.of(request))
    study.refresh_from_db()
    return {"cancelled": cancelled, "state": study.state, "stop_reason": study.stop_reason}


@api.post("/studies/{study_id}/confirm", response={201: dict, 404: dict})
def confirm_study_recommendation(request: HttpRequest, study_id: int, band: int = 0):
    """A confirming experiment of the study's `band`-th recommendation against its baseline (3 launches)."""
    require(request, "experiments.add_experiment")
    study = get_object_or_404(Study.objects.select_related("host", "profile", "baseline"), pk=study_id)
    if not 0 <= band < len(study.recommendation):
        return Status(404, {"detail": f"band: the study has {len(study.recommendation)} recommendations"})
    experiment = do_confirm_recommendation(study, band, actor=Actor.of(request))
    return Status(201, {"id": experiment.pk, "url": experiment.get_absolute_url()})
