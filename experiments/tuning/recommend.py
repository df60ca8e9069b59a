"""A study's answer (pure): the best config per concurrency with its speedup interval (`analysis.comparison`, the
same interval as an experiment's page), and the bands of neighbouring concurrencies that share one answer:
"c <= 4: s3-k1, 1.18x [1.12, 1.24]; c >= 8: no speculation".

A band says where it is not yet sure. At each concurrency the winner is compared with its opponent through the
comparison pipeline (`compare_configs`, the verdict every experiment page shows): a speculating winner against the
baseline, the baseline against the fastest candidate. The winner is settled there only where that verdict is
conclusive (faster, or the candidate slower); elsewhere the band says "not yet settled between X and Y at c = 4
(1.00x [0.97, 1.03])" with what would settle it (`settling_note`, the experiment page's "N more launches": one
study launch is one sample per config and concurrency)."""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis import cards, comparison
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
    # The comparison of the winner with its opponent (the baseline, or for the baseline the fastest candidate):
    # settled where its verdict is conclusive; `note` says what would settle it, `more_launches` how many.
    settled: bool = False
    versus: str | None = None
    note: str = ""
    more_launches: int | None = None


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
            answer = f"{self.label}: no speculation"
        else:
            first = self.best[0]
            interval = f" [{first.ci_low:.2f}, {first.ci_high:.2f}]" if first.ci_low is not None else ""
            speedup = f", {first.speedup:.2f}x{interval} at c = {first.concurrency}" if first.speedup else ""
            answer = f"{self.label}: {self.config}{speedup}"
        return "; ".join([answer, *self.certainty()])

    def certainty(self) -> list[str]:
        """Where the band's winner is settled and where not yet, with what would settle it (empty for a band
        built without comparisons, such as an experiment's schedule)."""
        compared = [b for b in self.best if b.versus is not None]
        settled = [b.concurrency for b in compared if b.settled]
        parts = []
        if settled and len(settled) == len(self.best):
            parts.append("settled" if len(self.best) == 1 else "settled at every concurrency")
        elif settled:
            parts.append("settled at " + ", ".join(f"c = {level}" for level in settled))
        for b in compared:
            if not b.settled:
                parts.append(f"not yet settled between {_named(b.config)} and {_named(b.versus)} {b.note}")
        return parts


def best_per_concurrency(history: History, settings: Settings) -> list[Best]:
    out = []
    for level, race in races(history, settings).items():
        if race.leader is None:
            continue
        leader = str(race.leader)
        launches = race.standings[leader].n
        # The baseline's opponent is the fastest candidate: the one that would have won, had it been faster.
        rivals = sorted((k for k in race.standings if k != BASELINE), key=lambda k: -race.standings[k].mean)
        candidate = leader if leader != BASELINE else (rivals[0] if rivals else None)
        row = _compare(history, settings, level, candidate) if candidate else None
        if row is None:
            out.append(Best(level, leader, None, None, None, launches))
            continue
        settled = row.verdict == (comparison.FASTER if leader != BASELINE else comparison.SLOWER)
        note = "" if settled else _unsettled_note(row, settings.tolerance, named=leader == BASELINE)
        out.append(
            Best(
                level,
                leader,
                row.speedup if leader != BASELINE else None,
                row.ci_low if leader != BASELINE else None,
                row.ci_high if leader != BASELINE else None,
                launches,
                settled=settled,
                versus=BASELINE if leader != BASELINE else candidate,
                note=note,
                # One study launch is one sample per config and concurrency.
                more_launches=None if settled else comparison.launches_to_settle(row, 1),
            )
        )
    return out


def rows(history: History, settings: Settings) -> list[comparison.ComparisonRow]:
    """Every measured config against the baseline at every concurrency both were measured at: the rows the study's
    winners are judged by (`best_per_concurrency`), for a view that shows them all (the bake-off)."""
    out: list[comparison.ComparisonRow] = []
    if BASELINE not in history.samples:
        return out
    for name in history.samples:
        if name == BASELINE:
            continue
        for level in settings.concurrency:
            row = _compare(history, settings, level, name)
            if row is not None:
                out.append(row)
    return out


def _compare(history: History, settings: Settings, level: int, candidate: str) -> comparison.ComparisonRow | None:
    samples = [
        comparison.Sample(name, level, launch, 0, value)
        for name in (BASELINE, candidate)
        for launch, value in enumerate(history.samples[name].get(level, []))
    ]
    rows = comparison.compare_configs(
        samples,
        baseline=BASELINE,
        candidates=[candidate],
        outputs_differ=history.outputs_differ,
        min_effect=settings.tolerance,
    )
    return rows[0] if rows else None


def _unsettled_note(row: comparison.ComparisonRow, tolerance: float, *, named: bool) -> str:
    """ "at c = 4 (1.00x [0.97, 1.03]): about 3 more launches would settle it" (the candidate named in the
    parenthesis when the winner is the baseline, so the ratio reads as whose it is)."""
    ratio = f"{row.candidate}: {cards.ratio(row)}" if named else cards.ratio(row)
    needs = comparison.settling_note(row, passes_per_launch=1, min_effect=tolerance)
    launches = comparison.launches_to_settle(row, 1)
    if launches is not None and row.runs_needed is not None and row.runs_needed < comparison.MAX_RUNS_NEEDED:
        needs = f"about {launches} more launch{'es' if launches != 1 else ''} would settle it"
    return f"at c = {row.concurrency} ({ratio}): {needs}"


def _named(config: str | None) -> str:
    return "no speculation" if config == BASELINE else str(config)


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
