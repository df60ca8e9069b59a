"""Sweeps: a grid of candidates from value lists (steps x topk x draft tokens x flags x env), previewed before
submitting."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Schema, Status
from ninja.errors import HttpError

from ..forms import (
    BenchmarkProfileForm,
)
from ..forms.sweeps import SweepForm, SweepPreview
from .base import api, config_data, host_name, profile_data, require

SWEEP_KEYS = frozenset({"base", *SweepForm.base_fields})


class SweepPreviewIn(Schema):
    host: str | int
    sweep: dict[str, Any]
    profile: dict[str, Any] | int


def sweep_form(sweep: dict[str, Any]) -> SweepForm:
    """The API's `sweep` object as the sweep form: its value lists, and the config they vary (inline or by id)."""
    unknown = sorted(str(key) for key in set(sweep) - SWEEP_KEYS)
    if unknown:
        raise HttpError(
            422, f"sweep: unknown keys {', '.join(unknown)[:200]} (it takes {', '.join(sorted(SWEEP_KEYS))})"
        )
    base = sweep.get("base")
    known_base = isinstance(base, dict) or (isinstance(base, int) and not isinstance(base, bool))
    base_data = config_data(base, "sweep.base") if known_base else None  # type: ignore[arg-type]
    return SweepForm({k: v for k, v in sweep.items() if k != "base"}, base_data=base_data)


@api.post("/sweeps/preview", response={200: dict, 422: dict})
def preview_sweep(request: HttpRequest, payload: SweepPreviewIn):
    """The candidates a sweep gives (named after their values), the combinations it skips and why, and the launches
    it costs with their estimated duration; nothing is saved."""
    require(request, "experiments.add_experiment")
    sweep = sweep_form(payload.sweep)
    preview = SweepPreview(host_name(payload.host), sweep, BenchmarkProfileForm(profile_data(payload.profile)))
    if not preview.is_valid():
        return Status(422, {"detail": "invalid sweep", "errors": preview.errors, **sweep.grid_json()})
    return preview.as_json()
