"""Compare runs or configs picked from any experiments of one request shape: the page's comparison as JSON."""

from __future__ import annotations

from typing import Annotated

from django.http import HttpRequest
from ninja import Query
from pydantic import Field

from experiments import serializers
from experiments.reads import profile_traces
from experiments.reads.comparisons import (
    MAX_PICKS,
    PICK_PATTERN,
    NotComparable,
    PickNotFound,
    PicksDiffer,
    build_comparison,
    parse_picks,
)

from .base import api, require
from .refusals import documented, refused, responses

# The picks as parse_picks reads them (the schema states the list's bounds and each pick's shape); what no schema
# states is answered: a pick that names no row is a 404, picks measured with different request shapes a 409.
PICKS = Query(..., min_length=1, max_length=MAX_PICKS)
PickText = Annotated[str, Field(pattern=PICK_PATTERN)]


@api.get("/compare", response=responses(200, 409), openapi_extra=documented(404, 409))
def compare(request: HttpRequest, pick: list[PickText] = PICKS):
    """`?pick=r12&pick=c3-7`: runs (`r<run id>`) or an experiment's config (`c<experiment id>-<config id>`), the
    first the reference; 404 for a pick that names no run or config, 409 when they do not compare (different
    request shapes), 422 with the reason for a pick that is not one."""
    require(request, "experiments.view_run")
    try:
        result = build_comparison(parse_picks((pick or [])[: MAX_PICKS + 1]))
    except NotComparable as exc:
        status = 404 if isinstance(exc, PickNotFound) else 409 if isinstance(exc, PicksDiffer) else 422
        return refused(str(exc), {"pick": [str(exc)]}, status)
    return {
        "reference": result.reference.label,
        "picks": [
            {
                "pick": p.pick.token,
                "label": p.label,
                "experiment": p.experiment.pk,
                "run": p.run.pk if p.run else None,
                "config": p.config.name,
                "config_id": p.config.pk,
                "host": p.experiment.host.name,
            }
            for p in result.picked
        ],
        "differences": result.differences,
        # The experiment API's rows (serializers/comparisons.py), the pick labels as candidates.
        "comparison": serializers.comparison_rows_json(result.verdicts) if result.verdicts else [],
        "headline": result.verdicts.headline if result.verdicts else None,
        "verdicts": serializers.verdicts_json(result.verdicts) if result.verdicts else [],
        "break_even": result.break_even,
        "never_pays": result.never_pays,
        # Each profiled pick's decode-step breakdown against the profiled reference (reads.profile_traces).
        "profile_diffs": profile_traces.diffs_of_picks(result.picked),
    }
