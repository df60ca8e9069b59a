"""What a token costs: money per million tokens from a GPU-hour price, and energy per token from the power samples
taken during a cell (integrated per GPU; a cell whose samples leave gaps says so rather than guessing). Pure."""

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from .deployment import require_count, require_positive, require_rate


def cost_per_million_tokens(cost_per_gpu_hour: float | None, gpus: int, throughput_tok_s: float | None) -> float | None:
    """Money per million tokens: cost_per_gpu_hour x gpus / (throughput_tok_s x 3600) x 1e6, gpus every GPU the
    config occupies; per million of the tokens the throughput counts (output tok/s gives the cost of output tokens).
    None when the cost is missing or the throughput is missing or not positive. ValueError for fewer than one GPU
    or a negative cost."""
    require_count("gpus", gpus)
    if cost_per_gpu_hour is None or throughput_tok_s is None:
        return None
    require_rate("cost_per_gpu_hour", cost_per_gpu_hour)
    if not (math.isfinite(throughput_tok_s) and throughput_tok_s > 0):
        return None
    return cost_per_gpu_hour * gpus / (throughput_tok_s * 3600) * 1e6


NO_READING = "no power reading"
POWER_NOT_READ = "power not read"


@dataclass(frozen=True)
class PowerGap:
    """Where a GPU's power is unknown in the window: from `start` to `end` (seconds, the sample clock). `gpu` is None
    when no GPU reported at all."""

    gpu: int | None
    start: float
    end: float
    reason: str

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def __str__(self) -> str:
        who = "every GPU" if self.gpu is None else f"GPU {self.gpu}"
        return f"{who}: {self.reason} for {self.seconds:.1f} s ({self.start:.1f} s to {self.end:.1f} s)"


@dataclass(frozen=True)
class Energy:
    """Joules the GPUs drew over the window, and per output token; both None when `gaps` is not empty. `gpus` are the
    GPU indices that had samples."""

    joules_per_token: float | None
    joules: float | None
    gpus: tuple[int, ...]
    gaps: tuple[PowerGap, ...]


def energy_per_token(
    samples: Iterable[tuple[float, int, float | None]],
    start: float,
    end: float,
    output_tokens: int,
    max_gap_s: float = 5.0,
) -> Energy:
    """J per output token over [start, end]: each GPU's power (`samples`: (t seconds, gpu index, watts or None))
    integrated by the trapezoid rule over the window, summed over the GPUs, divided by `output_tokens`. The window's
    edges take the value interpolated between the neighbouring readings, or the nearest reading when none lies
    beyond the edge.

    Nothing is guessed: the result has no joules and lists the gaps when a GPU's readings leave more than
    `max_gap_s` of the window between two of them, or its first reading comes more than `max_gap_s` after the start
    or its last more than `max_gap_s` before the end, or a reading inside the window has no power. ValueError for
    an empty or non-finite window, fewer than one output token, a non-positive `max_gap_s` or a negative power.
    """
    for name, value in (("start", start), ("end", end), ("max_gap_s", max_gap_s)):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    if end <= start:
        raise ValueError(f"the window must end after it starts, got {start!r} to {end!r}")
    require_count("output_tokens", output_tokens)
    require_positive("max_gap_s", max_gap_s)
    by_gpu: dict[int, list[tuple[float, float | None]]] = defaultdict(list)
    for t, gpu, power in samples:
        if not math.isfinite(t):
            raise ValueError(f"sample times must be finite, got {t!r} for GPU {gpu}")
        if power is not None and power < 0:
            raise ValueError(f"power must be non-negative, got {power!r} W for GPU {gpu} at {t!r}")
        by_gpu[gpu].append((t, power if power is None or math.isfinite(power) else None))
    if not by_gpu:
        return Energy(None, None, (), (PowerGap(None, start, end, NO_READING),))
    gaps: list[PowerGap] = []
    joules = 0.0
    for gpu in sorted(by_gpu):
        readings = sorted(by_gpu[gpu], key=lambda reading: reading[0])
        valid = [(t, power) for t, power in readings if power is not None]
        own = _unread_power(gpu, readings, valid, start, end) + _sampling_gaps(gpu, valid, start, end, max_gap_s)
        gaps.extend(own)
        if not own:
            joules += _integrate(valid, start, end)
    if gaps:
        return Energy(None, None, tuple(sorted(by_gpu)), tuple(gaps))
    return Energy(joules / output_tokens, joules, tuple(sorted(by_gpu)), ())


def _unread_power(
    gpu: int, readings: list[tuple[float, float | None]], valid: list[tuple[float, float]], start: float, end: float
) -> list[PowerGap]:
    # The power is unknown from the last good reading before a failed one to the first good one after it.
    gaps: dict[tuple[float, float], None] = {}
    for t, power in readings:
        if power is None and start <= t <= end:
            before = max((v for v, _ in valid if v < t), default=start)
            after = min((v for v, _ in valid if v > t), default=end)
            gaps[max(before, start), min(after, end)] = None
    return [PowerGap(gpu, low, high, POWER_NOT_READ) for low, high in gaps]


def _sampling_gaps(
    gpu: int, valid: list[tuple[float, float]], start: float, end: float, max_gap_s: float
) -> list[PowerGap]:
    if not valid:
        return [PowerGap(gpu, start, end, NO_READING)]
    times = [t for t, _ in valid]
    gaps = []
    if times[0] - start > max_gap_s:
        gaps.append(PowerGap(gpu, start, times[0], NO_READING))
    for left, right in pairwise(times):
        low, high = max(left, start), min(right, end)
        if high - low > max_gap_s:
            gaps.append(PowerGap(gpu, low, high, NO_READING))
    if end - times[-1] > max_gap_s:
        gaps.append(PowerGap(gpu, times[-1], end, NO_READING))
    return gaps


def _power_at(valid: list[tuple[float, float]], t: float) -> float:
    if t <= valid[0][0]:
        return valid[0][1]
    for (t0, p0), (t1, p1) in pairwise(valid):
        if t0 <= t <= t1:
            return p0 if t1 == t0 else p0 + (p1 - p0) * (t - t0) / (t1 - t0)
    return valid[-1][1]


def _integrate(valid: list[tuple[float, float]], start: float, end: float) -> float:
    knots = [(start, _power_at(valid, start)), *((t, p) for t, p in valid if start < t < end)]
    knots.append((end, _power_at(valid, end)))
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in pairwise(knots))
