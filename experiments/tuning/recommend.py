"""A study's answer (pure): the best config per concurrency with its speedup interval (`analysis.comparison`, the
same interval as an experiment's page), and the bands of neighbouring concurrencies that share one answer:
"c <= 4: s3-k1, 1.18x [1.12, 1.24]; c >= 8: no speculation"."""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis import comparison
from ..analysis.adaptive_schedule import BandWinner
from ..rules import sweeps
from .plan import BASELINE, History, Settings, races
from .space import SearchSpace


@dataclass(frozen=True)
class Best:
    concurrency: int
    config: str  # BASELINE: no speculation
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    launches: int


@dataclass(frozen=True)
class Band:
    low: int
    high: int
    config: str
    best: list[Best]

    @property
    def label(self) -> str:
        if self.low == self.high:
            return f"c = {self.low}"
        return f"{self.low} <= c <= {self.high}"

    def describe(self) -> str:
        if self.config == BASELINE:
            return f"{self.label}: no speculation"
        first = self.best[0]
        interval = f" [{first.ci_low:.2f}, {first.ci_high:.2f}]" if first.ci_low is not None else ""
        speedup = f", {first.speedup:.2f}x{interval} at c = {first.concurrency}" if first.speedup else ""
        return f"{self.label}: {self.config}{speedup}"


def best_per_concurrency(history: History, settings: Settings) -> list[Best]:
    out = []
    for level, race in races(history, settings).items():
        if race.leader is None:
            continue
        leader = str(race.leader)
        speedup = low = high = None
        if leader != BASELINE:
            samples = [
                comparison.Sample(name, level, launch, 0, value)
                for name in (BASELINE, leader)
                for launch, value in enumerate(history.samples[name].get(level, []))
            ]
            rows = comparison.compare_configs(
                samples,
                baseline=BASELINE,
                candidates=[leader],
                outputs_differ=history.outputs_differ,
                min_effect=settings.tolerance,
            )
            if rows:
                speedup, low, high = rows[0].speedup, rows[0].ci_low, rows[0].ci_high
        out.append(Best(level, leader, speedup, low, high, race.standings[leader].n))
    return out


def bands(best: list[Best]) -> list[Band]:
    """Neighbouring concurrencies (in the study's order) with the same best config, merged."""
    out: list[Band] = []
    for item in sorted(best, key=lambda b: b.concurrency):
        if out and out[-1].config == item.config:
            last = out[-1]
            out[-1] = Band(last.low, item.concurrency, item.config, [*last.best, item])
        else:
            out.append(Band(item.concurrency, item.concurrency, item.config, [item]))
    return out


def band_winners(bands_: list[Band], space: SearchSpace) -> list[BandWinner]:
    """The bands with their winners' speculative fields and launch settings, as the adaptive schedule reads them
    (`analysis.adaptive_schedule.build_adaptive_schedule`)."""
    out = []
    for band in bands_:
        if band.config == BASELINE:
            out.append(BandWinner(band.low, band.high, band.config))
            continue
        candidate = space.candidate(band.config)
        env = candidate.get("env") or {}
        settings = (*[str(arg) for arg in candidate.get("extra_args") or []], *(f"{k}={env[k]}" for k in sorted(env)))
        out.append(
            BandWinner(
                band.low,
                band.high,
                band.config,
                candidate.get("speculative_algorithm"),
                candidate.get(sweeps.STEPS),
                candidate.get(sweeps.TOPK),
                candidate.get("speculative_draft_model_path"),
                tuple(settings),
            )
        )
    return out
