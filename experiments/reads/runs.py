"""The runs list of the API (`GET /api/runs`): newest first, filtered, bounded; one query."""

from __future__ import annotations

from django.db.models import QuerySet

from experiments.models import Run

MAX_RUNS = 200


def run_rows(*, experiment: int | None = None, state: str = "", host: str = "", limit: int = 50) -> list[Run]:
    runs: QuerySet[Run] = Run.objects.select_related("config", "host").defer("live_facts", "effective_args")
    if experiment is not None:
        runs = runs.filter(experiment_id=experiment)
    if state == "active":
        runs = runs.exclude(state__in=Run.TERMINAL_STATES)
    elif state:
        runs = runs.filter(state=state)
    if host:
        runs = runs.filter(host__name=host)
    return list(runs.order_by("-created_at", "-id")[: max(1, min(limit, MAX_RUNS))])
