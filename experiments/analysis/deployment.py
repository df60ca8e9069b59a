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

from .comparison import CONFIDENCE
from .intervals import mean_interval
from .tdist import t_quantile


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
class Spread:
    """How a curve point's passes scatter, what a reading's interval is built from (`gain_at_pace_of`):
    the variance over passes of per-GPU throughput relative to its mean (to first order, of its log), and of
    interactivity, with `n_tok_s` and `n_interactivity` samples each; `covariance` of the two (throughput relative
    to its mean) when they were measured pass by pass together, else None."""

    n_tok_s: int
    n_interactivity: int
    log_tok_s_var: float
    interactivity_var: float
    covariance: float | None


@dataclass(frozen=True)
class CurvePoint:
    """A config at one concurrency: mean output tok/s per GPU and mean interactivity (tok/s/user) over its passes,
    each with its 95% Student t interval; bounds are None with a single pass (no spread, so no interval). `n` is
    the number of throughput samples; `spread` the passes' scatter (None for a point not built from passes, which
    then gives a gain no interval)."""

    concurrency: int
    tok_s_per_gpu: float
    tok_s_per_gpu_low: float | None
    tok_s_per_gpu_high: float | None
    interactivity: float
    interactivity_low: float | None
    interactivity_high: float | None
    n: int
    spread: Spread | None = None


def deployment_curve(cells: Iterable[CellSamples], gpus: int) -> list[CurvePoint]:
    """A config's points by ascending concurrency. Per-GPU throughput is each pass's output tok/s / `gpus`;
    interactivity is each pass's 1000 / mean TPOT, averaged over the passes (the mean of the per-pass paces, not
    1000 / the mean TPOT; the two differ by second-order terms in the spread). A cell whose two lists are equally
    long is read as pass by pass, its throughput and TPOT paired. ValueError for fewer than one GPU, a concurrency
    without samples of both, or a sample that is not positive and finite (a failed pass is the caller's to leave
    out, as for `compare`)."""
    require_count("gpus", gpus)
    throughput: dict[int, list[float]] = defaultdict(list)
    tpot: dict[int, list[float]] = defaultdict(list)
    unpaired: set[int] = set()
    for cell in cells:
        require_count("concurrency", cell.concurrency)
        for value in cell.output_throughput:
            require_positive(f"output throughput at concurrency {cell.concurrency}", value)
        for value in cell.mean_tpot_ms:
            require_positive(f"mean TPOT at concurrency {cell.concurrency}", value)
        throughput[cell.concurrency].extend(cell.output_throughput)
        tpot[cell.concurrency].extend(cell.mean_tpot_ms)
        if len(cell.output_throughput) != len(cell.mean_tpot_ms):
            unpaired.add(cell.concurrency)
    points = []
    for level in sorted(throughput.keys() | tpot.keys()):
        if not throughput[level] or not tpot[level]:
            raise ValueError(f"concurrency {level} needs at least one output throughput and one mean TPOT sample")
        per_gpu = [value / gpus for value in throughput[level]]
        paces = [1000 / value for value in tpot[level]]
        mean_per_gpu, mean_pace = mean_interval(per_gpu), mean_interval(paces)
        spread = _spread(per_gpu, mean_per_gpu[0], paces, mean_pace[0], paired=level not in unpaired)
        points.append(CurvePoint(level, *mean_per_gpu, *mean_pace, n=len(per_gpu), spread=spread))
    return points


def _spread(
    per_gpu: Sequence[float], mean_per_gpu: float, paces: Sequence[float], mean_pace: float, *, paired: bool
) -> Spread:
    relative = [value / mean_per_gpu - 1 for value in per_gpu]
    offsets = [value - mean_pace for value in paces]
    return Spread(
        len(per_gpu),
        len(paces),
        _moment(relative, relative),
        _moment(offsets, offsets),
        _moment(relative, offsets) if paired else None,
    )


def _moment(one: Sequence[float], other: Sequence[float]) -> float:
    """The unbiased sample (co)variance of two centred series; 0 for a single sample (which gives no interval)."""
    return sum(a * b for a, b in zip(one, other, strict=True)) / (len(one) - 1) if len(one) > 1 else 0.0


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
    # The measured points read, each with its weight in the reading (1 at a measured point).
    points: tuple[tuple[CurvePoint, float], ...]
    # The curve's slope, d log(tok/s per GPU) / d interactivity, where it is read: one between two points; at a
    # measured point, one for each segment beside it (none at a single-point curve).
    slopes: tuple[float, ...]


def _read_at(curve: Sequence[CurvePoint], target: float) -> _Reading | None:
    for point in curve:
        require_positive(f"tok/s per GPU at concurrency {point.concurrency}", point.tok_s_per_gpu)
    ordered = sorted(curve, key=lambda point: (point.interactivity, point.tok_s_per_gpu))
    if not ordered or not ordered[0].interactivity <= target <= ordered[-1].interactivity:
        return None
    exact = [point for point in ordered if point.interactivity == target]
    if exact:
        # At a measured point, that point's own numbers (the highest throughput among points of equal pace).
        point = exact[-1]
        below = [other for other in ordered if other.interactivity < target][-1:]
        above = [other for other in ordered if other.interactivity > target][:1]
        return _Reading(math.log(point.tok_s_per_gpu), ((point, 1.0),), tuple(_slope(point, o) for o in below + above))
    left, right = next(
        (left, right) for left, right in pairwise(ordered) if left.interactivity < target < right.interactivity
    )
    weight = (target - left.interactivity) / (right.interactivity - left.interactivity)
    log_left, log_right = math.log(left.tok_s_per_gpu), math.log(right.tok_s_per_gpu)
    return _Reading(
        log_left + weight * (log_right - log_left), ((left, 1 - weight), (right, weight)), (_slope(left, right),)
    )


def _slope(one: CurvePoint, other: CurvePoint) -> float:
    return math.log(other.tok_s_per_gpu / one.tok_s_per_gpu) / (other.interactivity - one.interactivity)


# One point's term in a reading's variance (log scale) and the degrees of freedom it was estimated with.
_Part = tuple[float, int]


def _parts(points: Sequence[tuple[CurvePoint, float]], slope: float) -> list[_Part] | None:
    """The delta method's terms of a reading: to first order, a reading moves with each point's log throughput by
    its weight and with each point's pace by -slope x weight (a pace measured high puts the target nearer the
    other point), so each point adds weight^2 x var(its mean log throughput - slope x its mean pace). None when
    a point has a single pass or no spread to read."""
    parts = []
    for point, weight in points:
        spread = point.spread
        if spread is None or min(spread.n_tok_s, spread.n_interactivity) < 2:
            return None
        parts.append((weight**2 * _point_variance(spread, slope), min(spread.n_tok_s, spread.n_interactivity) - 1))
    return parts


def _point_variance(spread: Spread, slope: float) -> float:
    tok_s = spread.log_tok_s_var / spread.n_tok_s
    pace = spread.interactivity_var / spread.n_interactivity
    if spread.covariance is None:
        # Not measured pass by pass together: the covariance is unknown, so the one that widens most (|r| = 1).
        return (math.sqrt(tok_s) + abs(slope) * math.sqrt(pace)) ** 2
    # A fast pass serves more and answers faster, so the two errors are correlated and their covariance counts.
    return max(tok_s + slope**2 * pace - 2 * slope * spread.covariance / spread.n_tok_s, 0.0)


def _widest(points: Iterable[CurvePoint]) -> float | None:
    """The widest log half-width of the points' own t intervals; None when one has none, or one reaching 0 (which
    has no log)."""
    widths = []
    for point in points:
        low, high = point.tok_s_per_gpu_low, point.tok_s_per_gpu_high
        if low is None or high is None or low <= 0:
            return None
        widths.append(math.log(high / low) / 2)
    return max(widths)


def _t_half_width(parts: Sequence[_Part]) -> float:
    """The t half-width of the terms' sum, with Welch-Satterthwaite degrees of freedom."""
    total = sum(variance for variance, _ in parts)
    if total <= 0:
        return 0.0
    df = total**2 / sum(variance**2 / df for variance, df in parts)
    return t_quantile(0.5 + CONFIDENCE / 2, df) * math.sqrt(total)


def _worst(reading: _Reading, *others: tuple[CurvePoint, float]) -> list[_Part] | None:
    """The reading's terms (with `others` read at the same slope), under the slope beside it that gives the widest
    interval: at a measured point between two segments, which way its pace erred is unknown."""
    found = [_parts([*reading.points, *others], slope) for slope in reading.slopes or (0.0,)]
    if any(parts is None for parts in found):
        return None
    return max((parts for parts in found if parts is not None), key=_t_half_width)


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
    """Candidate tok/s per GPU / baseline tok/s per GPU at interactivity `target`, with its 95% interval
    (`gain_at_pace_of` says how); `low`/`high` None when a point read lacks one. `concurrencies`: the candidate's
    measured concurrencies it was read from (one at a measured point, two between)."""

    ratio: float
    low: float | None
    high: float | None
    target: float
    concurrencies: tuple[int, ...] = ()


def gain_at_interactivity(
    candidate_curve: Sequence[CurvePoint], baseline_curve: Sequence[CurvePoint], target: float
) -> Gain | None:
    """What the candidate serves per GPU over what the baseline does, both at interactivity `target`, a pace the
    question fixes (each side read by `throughput_at`); None when the target lies outside either curve's measured
    range. The interval is built as `gain_at_pace_of`'s, each side carrying its own points' errors: a point's pace
    measured off moves where the fixed target falls on that side's curve, by the slope there (at a measured point,
    whichever of its two segments' gives the wider interval). Where a curve is steep, as a baseline's is near its
    lowest concurrency, that makes a wide interval: at exactly this pace, that side is poorly known. ValueError for
    a target that is not positive and finite."""
    require_positive("target interactivity", target)
    candidate, baseline = _read_at(candidate_curve, target), _read_at(baseline_curve, target)
    if candidate is None or baseline is None:
        return None
    candidate_parts, baseline_parts = _worst(candidate), _worst(baseline)
    parts = None if candidate_parts is None or baseline_parts is None else candidate_parts + baseline_parts
    return _gain(candidate, baseline.log_value, [p for p, _ in baseline.points], parts, target)


def gain_at_pace_of(candidate_curve: Sequence[CurvePoint], baseline_point: CurvePoint) -> Gain | None:
    """What the candidate serves per GPU over what the baseline does at `baseline_point`, the candidate read at the
    pace the baseline's users get there (`throughput_at`); None when that pace lies outside the candidate's
    measured range.

    The interval carries every error of the reading, by the delta method on the log ratio, closed form (the same
    data give the same page): each measured point's throughput spread and its pace's, with their covariance over
    passes. The pace itself is measured: the baseline's, where the candidate is read, moves the reading by the
    candidate curve's slope there; each candidate point's moves where that pace falls between the two points. The
    terms add up (points are independent), the t quantile takes their Welch-Satterthwaite degrees of freedom, and
    the interval is never narrower than the measurements it came from: its log half-width is at least the
    quadrature sum of the baseline point's and the widest candidate point's own t interval. `low`/`high` are None
    when a point read has a single pass or an interval reaching 0.
    """
    candidate = _read_at(candidate_curve, baseline_point.interactivity)
    if candidate is None:
        return None
    return _gain(
        candidate,
        math.log(baseline_point.tok_s_per_gpu),
        [baseline_point],
        _worst(candidate, (baseline_point, -1.0)),
        baseline_point.interactivity,
    )


def _gain(
    candidate: _Reading,
    baseline_log: float,
    baseline_points: Sequence[CurvePoint],
    parts: list[_Part] | None,
    target: float,
) -> Gain:
    log_ratio = candidate.log_value - baseline_log
    read = tuple(sorted(point.concurrency for point, _ in candidate.points))
    floor = [_widest(p for p, _ in candidate.points), _widest(baseline_points)]
    if parts is None or floor[0] is None or floor[1] is None:
        return Gain(math.exp(log_ratio), None, None, target, read)
    half = max(_t_half_width(parts), math.hypot(floor[0], floor[1]))
    return Gain(math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half), target, read)
