"""Acceptance headroom studies: start one from an experiment's speculative config, read what it measured."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Schema, Status
from ninja.errors import HttpError

from experiments.reads.headroom import headroom_json, headroom_view, study_for

from ..actions.audit import Actor
from ..actions.headroom import do_start_headroom
from ..actions.quotas import QuotaExceeded
from ..forms.headroom import HeadroomForm
from ..forms.submission import plain_errors
from ..models import Experiment
from .base import api, require


class HeadroomIn(Schema):
    config: int | str  # a candidate of the experiment, by id or name
    accept_lengths: list[float] = []  # empty: 1.5, 2, 2.5 ... up to steps + 1


@api.post("/experiments/{experiment_id}/headroom", response={201: dict, 422: dict})
def start_headroom(request: HttpRequest, experiment_id: int, payload: HeadroomIn):
    """Queue a headroom study of one of the experiment's speculative candidates."""
    require(request, "experiments.add_experiment")
    source = get_object_or_404(Experiment.objects.select_related("host", "baseline", "profile"), pk=experiment_id)
    form = HeadroomForm(
        {"config": _config_id(source, payload.config), "accept_lengths": ", ".join(map(str, payload.accept_lengths))},
        experiment=source,
    )
    if not form.is_valid():
        return Status(422, {"detail": "invalid headroom study", "errors": plain_errors(form)})
    try:
        study = do_start_headroom(source, actor=Actor.of(request), **form.cleaned_data)
    except QuotaExceeded as exc:
        return Status(422, {"detail": "over quota", "errors": {"accept_lengths": [str(exc)]}})
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


def _config_id(source: Experiment, given: int | str) -> int | str:
    """A candidate named by its name, as its id (the form takes ids); anything else as given, for the form to refuse."""
    if isinstance(given, str):
        named = next((c.pk for c in source.ordered_candidates() if c.name == given), None)
        return named if named is not None else given[:200]
    return given
