"""The gain at a fixed interactivity, launch by launch, read from an experiment's usable measurements
(`gain_trend`), with its figures and sentences. Pure."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import deployment
from .deployment import Gain
from .deployment_view import Config, curves_of

# Fewer launches make no trend: one launch is the experiment's own figure.
MIN_LAUNCHES = 2


@dataclass(frozen=True)
class LaunchGain:
    """A candidate's gain in one launch (`launch` is the run's launch_index, 0 first); `ended_at` is when the
    launch's last measured run ended; `gain` None when either curve of that launch misses the pace."""

    launch: int
    ended_at: datetime | None
    gain: Gain | None


@dataclass
class GainTrend:
    baseline: str
    baseline_concurrency: int
    target: float
    candidates: dict[str, list[LaunchGain]] = field(default_factory=dict)

    @property
    def headlines(self) -> list[str]:
        """Per candidate, its first and latest figure and the range between, at the fixed pace."""
        out = []
        for name, launches in self.candidates.items():
            read = [entry for entry in launches if entry.gain is not None]
            where = f"At {self.target:.0f} tok/s per user (the baseline's pace at c={self.baseline_concurrency})"
            if not read:
                out.append(f"{where}, {name} has no launch whose curve reaches that pace.")
                continue
            first, last = read[0], read[-1]
            ratios = [entry.gain.ratio for entry in read if entry.gain is not None]
            out.append(
                f"{where}, {name} served {_gain_text(first.gain)} in launch {first.launch + 1} and "
                f"{_gain_text(last.gain)} in launch {last.launch + 1}, between {min(ratios):.2f}x and "
                f"{max(ratios):.2f}x over the {len(read)} launches that reach it."
            )
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "baseline_concurrency": self.baseline_concurrency,
            "interactivity": round(self.target, 3),
            "candidates": {
                name: [
                    {"launch": entry.launch, "ended_at": entry.ended_at.isoformat() if entry.ended_at else None}
                    | (
                        {"ratio": entry.gain.ratio, "low": entry.gain.low, "high": entry.gain.high}
                        if entry.gain
                        else {"ratio": None, "low": None, "high": None}
                    )
                    for entry in launches
                ]
                for name, launches in self.candidates.items()
            },
            "headlines": self.headlines,
        }


def _gain_text(gain: Gain | None) -> str:
    if gain is None:
        return "nothing"
    interval = f" [{gain.low:.2f}, {gain.high:.2f}]" if gain.low is not None and gain.high is not None else ""
    return f"{gain.ratio:.2f}x{interval}"


def gain_trend(
    usable: Sequence[Mapping[str, Any]],
    baseline: Config,
    candidates: Sequence[Config],
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
