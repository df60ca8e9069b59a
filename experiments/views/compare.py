"""Compare runs or configs picked from any experiments that share a request shape."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from experiments import serializers
from experiments.reads import profile_traces
from experiments.reads.comparisons import MAX_PICKS, NotComparable, PickedComparison, build_comparison, parse_picks

from ..models import Experiment
from .access import requires

SUGGESTED_EXPERIMENTS = 12


@requires("experiments.view_run")
def compare(request: HttpRequest) -> HttpResponse:
    tokens = request.GET.getlist("pick")[: MAX_PICKS + 1]
    # "Add" field: a run id (12), a pick as written in the address (r12, c3-7), or several, space-separated.
    added = [t if t[:1] in "rc" else f"r{t}" for t in request.GET.get("add", "").replace(",", " ").split()[:MAX_PICKS]]
    context: dict = {"tokens": tokens + added, "max_picks": MAX_PICKS}
    if not tokens and not added:
        return render(request, "experiments/compare.html", context)  # nothing picked yet: the page explains
    try:
        result = build_comparison(parse_picks(tokens + added))
    except NotComparable as refused:
        if not added or not tokens:
            context["error"] = str(refused)
            context["picks_left"] = [(token, _address([t for t in tokens if t != token])) for token in tokens]
            return render(request, "experiments/compare.html", context, status=400)
        # What was just added does not fit: say why above the comparison it would have joined, which stays.
        try:
            result = build_comparison(parse_picks(tokens))
        except NotComparable:
            context["error"] = str(refused)
            context["picks_left"] = [(token, _address([t for t in tokens if t != token])) for token in tokens]
            return render(request, "experiments/compare.html", context, status=400)
        context["add_error"] = f"Not added ({' '.join(added)[:80]}): {refused}"
        context["tokens"] = tokens
    kept = [p.pick.token for p in result.picked]
    context.update(
        result=result,
        comparison=serializers.comparison_rows_json(result.verdicts) if result.verdicts else [],
        suggestions=_suggestions(result),
        picks_query=urlencode([("pick", t) for t in kept]),
        remove_urls=[_address([t for t in kept if t != token]) for token in kept],
        profile_diffs=profile_traces.diffs_of_picks(result.picked),
    )
    return render(request, "experiments/compare.html", context)


def _suggestions(result: PickedComparison) -> list[tuple[Experiment, list]]:
    """Configs of the latest experiments measured with the same request shape, to add with one click."""
    picked = {p.pick.token for p in result.picked}
    experiments = (
        Experiment.objects.filter(profile__series_key=result.series_key)
        .select_related("host", "baseline")
        .prefetch_related("candidate_set__config")[:SUGGESTED_EXPERIMENTS]
    )
    out = []
    for experiment in experiments:
        configs = [experiment.baseline, *(c.config for c in experiment.candidate_set.all())]
        offered = [c for c in configs if f"c{experiment.pk}-{c.pk}" not in picked]
        if offered:
            out.append((experiment, offered))
    return out


def _address(tokens: list[str]) -> str:
    return "?" + urlencode([("pick", t) for t in tokens])
