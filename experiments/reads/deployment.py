"""What the deployment view (analysis/deployment_view.py) reads beyond the usable cells' rows: each cell's request
rows and window end, and its runs' power samples (two queries)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from experiments.analysis.deployment_view import CellFacts
from experiments.models import GpuSample, Measurement


def cell_facts(usable: Sequence[Mapping[str, Any]], *, with_requests: bool) -> CellFacts:
    """The request rows (only `with_requests`: only an SLO reads them) and window ends of the `usable` cells, and
    the power samples of their runs: two queries, whatever the experiment's size."""
    ids = [m["id"] for m in usable]
    if not ids:
        return CellFacts()
    columns = ("id", "ended_at", "requests") if with_requests else ("id", "ended_at")
    requests, ended_at = {}, {}
    for row in Measurement.objects.filter(pk__in=ids).values_list(*columns):
        ended_at[row[0]] = row[1]
        if with_requests:
            requests[row[0]] = row[2] or []
    power: dict[int, list[tuple[float, int, float | None]]] = defaultdict(list)
    runs = {m["run_id"] for m in usable if ended_at.get(m["id"]) is not None}
    samples = GpuSample.objects.filter(run_id__in=runs).order_by("run_id", "at", "gpu")
    for run_id, at, gpu, watts in samples.values_list("run_id", "at", "gpu", "power_w").iterator():
        power[run_id].append((at.timestamp(), gpu, watts))
    return CellFacts(requests, ended_at, power)
