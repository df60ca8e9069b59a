"""The gain at a fixed interactivity, launch by launch (its figures and sentences; `reads.gain_trend` reads them
from an experiment's measurements). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .deployment import Gain

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
