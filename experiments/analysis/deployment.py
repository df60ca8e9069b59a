"""The deployment decision for a serving config: what it serves per GPU at the pace its users see, what a candidate
gains over a baseline at equal pace, which latency objectives (SLOs) it meets, and what a token costs in money and
in energy. Pure.

The denominators, as InferenceX and vLLM's `bench sweep plot_pareto` use them:
- **per GPU**: tok/s divided by every GPU the config occupies, tp x pp x dp (not per node, not per replica);
- **per user**: output tok/s divided by the concurrency (requests in flight). That is the pace of a busy slot over
  the whole benchmark, prefill and queueing included;
- **interactivity**: 1000 / TPOT ms, the tok/s one user sees while an answer streams (decode only, no TTFT). It is
  higher than per-user throughput whenever time goes to prefill or to waiting.

A config's curve is its points over concurrency; the frontier puts per-GPU output throughput (y) against
interactivity (x), and configs are compared at equal interactivity, never at equal concurrency: a speculative
config at concurrency 8 and a plain one at 8 give their users different experiences.

Latency objectives and goodput are in slo.py, cost and energy per token in energy.py.
"""

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from .intervals import mean_interval


def require_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")


def require_rate(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be non-negative and finite, got {value!r}")


def require_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")


def gpu_count(tp: int, pp: int = 1, dp: int = 1) -> int:
    """The GPUs a config occupies: tensor x pipeline x data parallel size. ValueError for a size below 1."""
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp)):
        require_count(name, value)
    return tp * pp * dp


def tokens_per_gpu(throughput_tok_s: float, gpus: int) -> float:
    """`throughput_tok_s` / `gpus`, gpus being every GPU the config occupies (`gpu_count`: tp x pp x dp). It counts
    the tokens the throughput counts (output only, or input + output); the frontier uses output tokens. ValueError
    for a negative or non-finite throughput or fewer than one GPU."""
    require_rate("throughput_tok_s", throughput_tok_s)
    require_count("gpus", gpus)
    return throughput_tok_s / gpus


def tokens_per_user(output_throughput: float, concurrency: int) -> float:
    """Output tok/s / concurrency (requests in flight): the pace of one busy slot over the whole benchmark, prefill
    and queueing included, so lower than `interactivity`. ValueError for a negative or non-finite throughput or a
    concurrency below 1."""
    require_rate("output_throughput", output_throughput)
    require_count("concurrency", concurrency)
    return output_throughput / concurrency


def interactivity(tpot_ms: float | None) -> float | None:
    """1000 / TPOT ms: the tok/s one user sees while an answer streams (tok/s/user, decode only: TTFT is not in
    TPOT). None for a TPOT that is missing, not positive or not finite."""
    if tpot_ms is None or not math.isfinite(tpot_ms) or tpot_ms <= 0:
        return None
    return 1000 / tpot_ms


@dataclass(frozen=True)
class CellSamples:
    """One config at one concurrency: one value per pass (every pass of every launch) of the server's output
    throughput (tok/s, all GPUs together) and of the pass's mean TPOT (ms). Cells of one concurrency are pooled."""

    concurrency: int
    output_throughput: Sequence[float]
    mean_tpot_ms: Sequence[float]


@dataclass(frozen=True)
class ConfigSamples:
    """A config's GPU count (`gpu_count`) and its cells."""

    gpus: int
    cells: Sequence[CellSamples]


@dataclass(frozen=True)
class CurvePoint:
    """A config at one concurrency: mean output tok/s per GPU and mean interactivity (tok/s/user) over its passes,
    each with its 95% Student t interval; bounds are None with a single pass (no spread, so no interval). `n` is
    the number of throughput samples."""

    concurrency: int
    tok_s_per_gpu: float
    tok_s_per_gpu_low: float | None
    tok_s_per_gpu_high: float | None
    interactivity: float
    interactivity_low: float | None
    interactivity_high: float | None
    n: int


def deployment_curve(cells: Iterable[CellSamples], gpus: int) -> list[CurvePoint]:
    """A config's points by ascending concurrency. Per-GPU throughput is each pass's output tok/s / `gpus`;
    interactivity is each pass's 1000 / mean TPOT, averaged over the passes (the mean of the per-pass paces, not
    1000 / the mean TPOT; the two differ by second-order terms in the spread). ValueError for fewer than one GPU, a
    concurrency without samples of both, or a sample that is not positive and finite (a failed pass is the
    caller's to leave out, as for `compare`)."""
    require_count("gpus", gpus)
    throughput: dict[int, list[float]] = defaultdict(list)
    tpot: dict[int, list[float]] = defaultdict(list)
    for cell in cells:
        require_count("concurrency", cell.concurrency)
        for value in cell.output_throughput:
            require_positive(f"output throughput at concurrency {cell.concurrency}", value)
        for value in cell.mean_tpot_ms:
            require_positive(f"mean TPOT at concurrency {cell.concurrency}", value)
        throughput[cell.concurrency].extend(cell.output_throughput)
        tpot[cell.concurrency].extend(cell.mean_tpot_ms)
    points = []
    for level in sorted(throughput.keys() | tpot.keys()):
        if not throughput[level] or not tpot[level]:
            raise ValueError(f"concurrency {level} needs at least one output throughput and one mean TPOT sample")
        per_gpu = mean_interval([value / gpus for value in throughput[level]])
        pace = mean_interval([1000 / value for value in tpot[level]])
        points.append(CurvePoint(level, *per_gpu, *pace, n=len(throughput[level])))
    return points


def deployment_curves(configs: Mapping[str, ConfigSamples]) -> dict[str, list[CurvePoint]]:
    """Every config's `deployment_curve`, by config name."""
    return {name: deployment_curve(config.cells, config.gpus) for name, config in configs.items()}


@dataclass(frozen=True)
class FrontierPoint:
    config: str
    point: CurvePoint


def _dominates(one: CurvePoint, other: CurvePoint) -> bool:
    return one.tok_s_per_gpu > other.tok_s_per_gpu and one.interactivity > other.interactivity


def pareto_front(curves: Mapping[str, Sequence[CurvePoint]]) -> list[FrontierPoint]:
    """The Pareto-optimal points of all configs, by ascending interactivity. A point is dominated when another point
    has both a higher per-GPU throughput and a higher interactivity, whether it is another config's or its own
    config's at another concurrency (no one would deploy it there either); a tie in either does not dominate. Means
    only: the intervals do not enter."""
    everything = [FrontierPoint(config, point) for config, points in curves.items() for point in points]
    front = [one for one in everything if not any(_dominates(other.point, one.point) for other in everything)]
    return sorted(front, key=lambda found: (found.point.interactivity, -found.point.tok_s_per_gpu))


@dataclass(frozen=True)
class _Reading:
    log_value: float
    log_half_width: float | None


def _log_bounds(point: CurvePoint) -> tuple[float, float] | None:
    low, high = point.tok_s_per_gpu_low, point.tok_s_per_gpu_high
    # A t interval reaching zero or below (few, scattered passes) has no log; the reading then has no interval.
    if low is None or high is None or low <= 0:
        return None
    return math.log(low), math.log(high)


def _read_at(curve: Sequence[CurvePoint], target: float) -> _Reading | None:
    for point in curve:
        require_positive(f"tok/s per GPU at concurrency {point.concurrency}", point.tok_s_per_gpu)
    ordered = sorted(curve, key=lambda point: (point.interactivity, point.tok_s_per_gpu))
    if not ordered or not ordered[0].interactivity <= target <= ordered[-1].interactivity:
        return None
    exact = [point for point in ordered if point.interactivity == target]
    if exact:
        # At a measured point, that point's own numbers (the highest throughput among points of equal pace).
        bounds = _log_bounds(exact[-1])
        return _Reading(math.log(exact[-1].tok_s_per_gpu), None if bounds is None else (bounds[1] - bounds[0]) / 2)
    left, right = next(
        (left, right) for left, right in pairwise(ordered) if left.interactivity < target < right.interactivity
    )
    return _interpolate(left, right, (target - left.interactivity) / (right.interactivity - left.interactivity))


def _interpolate(left: CurvePoint, right: CurvePoint, weight: float) -> _Reading:
    def between(a: float, b: float) -> float:
        return a + weight * (b - a)

    log_value = between(math.log(left.tok_s_per_gpu), math.log(right.tok_s_per_gpu))
    left_bounds, right_bounds = _log_bounds(left), _log_bounds(right)
    if left_bounds is None or right_bounds is None:
        return _Reading(log_value, None)
    low, high = between(left_bounds[0], right_bounds[0]), between(left_bounds[1], right_bounds[1])
    return _Reading(log_value, (high - low) / 2)


def throughput_at(curve: Sequence[CurvePoint], target: float) -> float | None:
    """A curve's tok/s per GPU at interactivity `target`: a measured point's own value, or between the two measured
    neighbours linearly in log(tok/s per GPU) against interactivity (log: a sweep's throughputs span orders of
    magnitude and are compared as ratios). None outside the measured range: the curve is never extrapolated."""
    reading = _read_at(curve, target)
    return None if reading is None else math.exp(reading.log_value)


@dataclass(frozen=True)
class LevelBest:
    interactivity: float
    config: str
    tok_s_per_gpu: float


def best_at_levels(curves: Mapping[str, Sequence[CurvePoint]]) -> list[LevelBest]:
    """At each interactivity any config was measured at (ascending), the config serving the most tok/s per GPU there,
    every curve read by `throughput_at`; a config whose measured range misses the level takes no part. A tie goes to
    the config named first."""
    levels = sorted({point.interactivity for points in curves.values() for point in points})
    best = []
    for level in levels:
        readings = [(config, throughput_at(points, level)) for config, points in curves.items()]
        config, value = max(((c, v) for c, v in readings if v is not None), key=lambda found: found[1])
        best.append(LevelBest(level, config, value))
    return best


@dataclass(frozen=True)
class Gain:
    """Candidate tok/s per GPU / baseline tok/s per GPU at interactivity `target`, with an approximate 95% interval
    (`gain_at_interactivity` says how); `low`/`high` None when either side lacks an interval."""

    ratio: float
    low: float | None
    high: float | None
    target: float


def gain_at_interactivity(
    candidate_curve: Sequence[CurvePoint], baseline_curve: Sequence[CurvePoint], target: float
) -> Gain | None:
    """What the candidate serves per GPU over what the baseline does, both at interactivity `target` (each read by
    `throughput_at`); None when the target lies outside either curve's measured range.

    The interval is an approximation. Each side's interval bounds are read at the target the way its mean is
    (log-linear between the neighbours), which treats the two neighbours' errors as moving together, the cautious
    choice; half the log width is that side's relative half-width. The two sides are independent, so their
    half-widths combine in quadrature around the log ratio (each already carries its own t quantile: Welch without
    the degrees-of-freedom correction). The interactivity's own uncertainty (the x position) is left out.
    ValueError for a target that is not positive and finite.
    """
    require_positive("target interactivity", target)
    candidate, baseline = _read_at(candidate_curve, target), _read_at(baseline_curve, target)
    if candidate is None or baseline is None:
        return None
    log_ratio = candidate.log_value - baseline.log_value
    if candidate.log_half_width is None or baseline.log_half_width is None:
        return Gain(math.exp(log_ratio), None, None, target)
    half = math.hypot(candidate.log_half_width, baseline.log_half_width)
    return Gain(math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half), target)
