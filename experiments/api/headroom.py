"""Acceptance headroom studies: start one from an experiment's speculative config, read what it measured."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Status
from ninja.errors import HttpError

from experiments.reads.headroom import headroom_view, study_for
from experiments.serializers import headroom_json

from ..actions.audit import Actor
from ..actions.headroom import do_start_headroom
from ..forms.headroom import HeadroomForm, eligible_configs
from ..forms.values import plain_errors
from ..models import Experiment
from .base import api, require
from .bodies import HeadroomIn
from .refusals import documented, refused, responses, status_of


@api.post(
    "/experiments/{experiment_id}/headroom",
    response=responses(201, 404, 409, 429),
    openapi_extra=documented(404, 409, 429),
)
def start_headroom(request: HttpRequest, experiment_id: int, payload: HeadroomIn):
    """Queue a headroom study of one of the experiment's speculative candidates."""
    require(request, "experiments.add_experiment")
    source = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    config_id = _config_id(source, payload.config)
    if config_id not in {c.pk for c in eligible_configs(source.ordered_candidates())}:
        why = (
            "Only an EAGLE-family speculative candidate with its steps set (and no simulated acceptance) is simulated."
        )
        return refused("invalid headroom study", {"config": [why]}, 409)
    form = HeadroomForm(
        {"config": config_id, "accept_lengths": ", ".join(map(str, payload.accept_lengths))}, experiment=source
    )
    if not form.is_valid():
        return refused("invalid headroom study", plain_errors(form), status_of([form]))
    study = do_start_headroom(source, actor=Actor.of(request), **form.cleaned_data)  # 429 past a quota (base.py)
    return Status(201, headroom_json(headroom_view(study)))


@api.get("/experiments/{experiment_id}/headroom")
def get_headroom(request: HttpRequest, experiment_id: int):
    """The study whose experiment this is, or the latest one started from it."""
    require(request, "experiments.view_experiment")
    study = study_for(experiment_id)
    if study is None:
        get_object_or_404(Experiment, pk=experiment_id)
        raise HttpError(404, "This experiment has no headroom study.")
    return headroom_json(headroom_view(study))


def _config_id(source: Experiment, given: int | str) -> int:
    """The candidate named by its id or name, as its id (the form takes ids); 404 when the experiment has none."""
    candidates = source.ordered_candidates()
    found = next((c.pk for c in candidates if (c.pk if isinstance(given, int) else c.name) == given), None)
    if found is None:
        raise HttpError(404, f"config: the experiment has no candidate {given!r}"[:300])
    return found
