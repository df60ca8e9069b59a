"""What a better draft would be worth: throughput against a simulated accept length, per concurrency. Pure.

An acceptance headroom study launches one speculative config with its accept length set by SGLang
(`SGLANG_SIMULATE_ACC_LEN`) at several lengths, beside the config as it is and the baseline. Per concurrency this
module lays the simulated points out as a curve, fits the straight line the break-even model predicts (tok/s grows
in proportion to accept length while the cycle's cost stays that of `steps` drafts and one verify, `breakeven.py`),
reads off the accept length where that line meets the baseline, and places the real draft (its measured accept
length and speedup) on it. The gain sentence compares the real draft with the next swept length at least half a
token better, at the lowest concurrency, where speculation pays most.

Simulated runs measure speed only: their outputs are not the model's (the verify step accepts what it is told to).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# How much better than the real draft the gain sentence looks (in accepted tokens per verify step).
GAIN_STEP = 0.5


@dataclass(frozen=True)
class CurvePoint:
    """One config at one concurrency: its accept length (simulated, or measured for the real draft), mean output
    tok/s, and speedup over the baseline with its 95% interval (None with one sample a side)."""

    accept_length: float
    tok_s: float
    speedup: float
    ci_low: float | None = None
    ci_high: float | None = None

    @property
    def interval(self) -> str:
        if self.ci_low is None or self.ci_high is None:
            return ""
        return f" [{self.ci_low:.2f}, {self.ci_high:.2f}]"


@dataclass(frozen=True)
class Level:
    """The curve at one concurrency. `break_even` is the accept length where the line through the simulated points
    meets the baseline (None with fewer than two points, or a line that does not rise)."""

    concurrency: int
    baseline_tok_s: float
    simulated: list[CurvePoint]
    real: CurvePoint | None
    slope: float | None  # tok/s per accepted token
    intercept: float | None
    break_even: float | None

    def tok_s_at(self, accept_length: float) -> float | None:
        """The fitted line's tok/s at `accept_length`."""
        if self.slope is None or self.intercept is None:
            return None
        return self.intercept + self.slope * accept_length


@dataclass(frozen=True)
class Headroom:
    levels: list[Level]
    accept_length: float | None  # the real draft's measured accept length at the lowest concurrency
    target: float | None  # the swept length the gain sentence names
    sentence: str  # the answer, with its intervals
    break_even_sentence: str

    def level(self, concurrency: int) -> Level | None:
        return next((level for level in self.levels if level.concurrency == concurrency), None)


def fit_line(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares (intercept, slope) of y on x; None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return mean_y - slope * mean_x, slope


def level_curve(
    concurrency: int, baseline_tok_s: float, simulated: Sequence[CurvePoint], real: CurvePoint | None
) -> Level:
    points = sorted(simulated, key=lambda p: p.accept_length)
    fit = fit_line([(p.accept_length, p.tok_s) for p in points])
    intercept, slope = fit if fit is not None else (None, None)
    break_even = None
    if intercept is not None and slope is not None and slope > 0:
        break_even = (baseline_tok_s - intercept) / slope
    return Level(concurrency, baseline_tok_s, points, real, slope, intercept, break_even)


def headroom(levels: Sequence[Level]) -> Headroom:
    """The study's answer from its curves (`level_curve` per concurrency)."""
    levels = sorted(levels, key=lambda level: level.concurrency)
    first = levels[0] if levels else None
    if first is None or not first.simulated:
        return Headroom(list(levels), None, None, "Not measured yet: no simulated accept length has a result.", "")
    c = first.concurrency
    real = first.real
    break_even = _break_even_sentence(first)
    if real is None:
        best = max(first.simulated, key=lambda p: p.accept_length)
        sentence = (
            f"The real draft has no measured accept length yet; at accept length {_length(best.accept_length)} this "
            f"config would give {best.speedup:.2f}x{best.interval} at c={c}."
        )
        return Headroom(list(levels), None, best.accept_length, sentence, break_even)
    above = sorted(p for p in {p.accept_length for p in first.simulated} if p > real.accept_length)
    wanted = [p for p in above if p >= real.accept_length + GAIN_STEP] or above[-1:]
    if not wanted:
        top = max(p.accept_length for p in first.simulated)
        sentence = (
            f"The real draft already accepts {real.accept_length:.2f} tokens per step, at or above every simulated "
            f"length (up to {_length(top)}): at c={c} it gives {real.speedup:.2f}x{real.interval}."
        )
        return Headroom(list(levels), real.accept_length, None, sentence, break_even)
    target = wanted[0]
    point = next(p for p in first.simulated if p.accept_length == target)
    sentence = (
        f"Raising accept length from {real.accept_length:.1f} to {_length(target)} would give "
        f"{point.speedup:.2f}x{point.interval} at c={c} instead of {real.speedup:.2f}x{real.interval}."
    )
    return Headroom(list(levels), real.accept_length, target, sentence, break_even)


def _length(value: float) -> str:
    """A swept accept length as the user gave it: 3.0, 2.5, 2.25."""
    return f"{value:.1f}" if round(value, 1) == value else f"{value:.2f}"


def _break_even_sentence(level: Level) -> str:
    at = f"at c={level.concurrency}"
    if level.break_even is None:
        return f"The break-even accept length {at} is not known: the simulated points do not rise with accept length."
    needed = level.break_even
    if needed < 1:
        text = f"This config pays at any acceptance {at}: its line meets the baseline below accept length 1"
    else:
        text = f"This config breaks even at accept length {needed:.2f} {at}"
    if level.real is not None:
        side = "above" if level.real.accept_length >= needed else "below"
        text += f"; the real draft measures {level.real.accept_length:.2f}, {side} it"
    return text + "."
