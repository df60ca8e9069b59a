"""Sweeps: a grid of candidates from value lists (steps x topk x draft tokens x flags x env), previewed before
submitting."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Status

from ..forms import (
    BenchmarkProfileForm,
)
from ..forms.sweeps import SweepForm, SweepPreview
from ..reads.queueing import launch_estimate
from .base import api, config_data, host_name, profile_data, require
from .bodies import SweepIn, SweepPreviewIn
from .refusals import documented, responses, status_of


def sweep_form(sweep: SweepIn) -> SweepForm:
    """The API's `sweep` object as the sweep form: its value lists, and the config they vary (inline or by id)."""
    return SweepForm(sweep.form_payload(), base_data=config_data(sweep.base, "sweep.base"))


@api.post("/sweeps/preview", response=responses(200, 403, 404, 409), openapi_extra=documented(403, 404, 409))
def preview_sweep(request: HttpRequest, payload: SweepPreviewIn):
    """The candidates a sweep gives (named after their values), the combinations it skips and why, and the launches
    it costs with their estimated duration; nothing is saved."""
    require(request, "experiments.add_experiment")
    sweep = sweep_form(payload.sweep)
    preview = SweepPreview(host_name(payload.host), sweep, BenchmarkProfileForm(profile_data(payload.profile)))
    if not preview.is_valid():
        status = status_of(preview.every_form())
        return Status(status, {"detail": "invalid sweep", "errors": preview.errors, **sweep.grid_json()})
    return preview.as_json(launch_estimate(*preview.launch_shape()))
