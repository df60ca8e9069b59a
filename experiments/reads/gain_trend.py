"""The gain at a fixed interactivity, launch by launch: what each candidate serves per GPU over the baseline, both
read at one pace per user, from each launch's own measurements. An experiment re-run over weeks (a nightly
schedule's nights, re-runs after an upgrade) shows here whether its deployment answer still holds.

The pace is fixed once for the whole history, the baseline's interactivity at its lowest concurrency over every
launch pooled, so each launch's figure answers the same question; a launch whose curve does not reach that pace
has no figure there, rather than one read at another pace."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from experiments.analysis import deployment
from experiments.analysis.deployment_view import curves_of
from experiments.analysis.gain_trend import MIN_LAUNCHES, GainTrend, LaunchGain
from experiments.models import ServerConfig


def gain_trend(
    usable: Sequence[Mapping[str, Any]],
    baseline: ServerConfig,
    candidates: Sequence[ServerConfig],
    ended_at: Mapping[int, datetime | None],
) -> GainTrend | None:
    """The trend from usable measurement rows (as `curves_of` reads them, with `run__launch_index`), `ended_at`
    by launch index; None with fewer than `MIN_LAUNCHES` launches measured or no baseline curve."""
    gpus = {config.name: config.gpu_count for config in (baseline, *candidates)}
    by_launch: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for row in usable:
        by_launch[row["run__launch_index"]].append(row)
    if len(by_launch) < MIN_LAUNCHES:
        return None
    pooled = curves_of(usable, gpus).get(baseline.name)
    if not pooled:
        return None
    trend = GainTrend(baseline.name, pooled[0].concurrency, pooled[0].interactivity)
    measured: set[str] = set()
    for launch in sorted(by_launch):
        curves = curves_of(by_launch[launch], gpus)
        reference = curves.get(baseline.name)
        for candidate in candidates:
            own = curves.get(candidate.name)
            measured.update([candidate.name] if own else [])
            gain = deployment.gain_at_interactivity(own, reference, trend.target) if own and reference else None
            trend.candidates.setdefault(candidate.name, []).append(LaunchGain(launch, ended_at.get(launch), gain))
    trend.candidates = {name: launches for name, launches in trend.candidates.items() if name in measured}
    return trend if trend.candidates else None
