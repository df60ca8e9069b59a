"""Regressions over history: is the newest result out of line, and where did a series change level?

A series is one metric of one (host, config hash, profile, concurrency), oldest first: the output throughput
(tok/s), or the accept length of a speculative config (`Metric`; both are positive and move by relative steps, so
one rule serves both). The web
layer no longer flags on these tests directly: `check_latest` is the suspicion stage of `confirmation`, whose
confirming runs decide what becomes a flag (a per-check rate cannot keep a series' whole life quiet).
`assess_series` combines the two tests below for a series as it stands.

`check_latest`, the lookback test (Conbench's idea): the newest values against the `lookback` values before
them. Conbench scores the newest value alone, z = (x - mean) / sd. A single value cannot show a 5% step under 2%
noise (that is 2.5 sd; a z threshold low enough to catch it fires on noise all the time), so the newest 1..`recent`
values are scored as a group: a two-sample t statistic, tail mean against history mean on the pooled spread, turned
into the normal z with the same tail probability. With one newest value this is Conbench's z (up to the
sqrt(1 + 1/n) of a prediction interval); the t step keeps the false-alarm rate the same at 8 values of history as
at 100, which a fixed z threshold does not.

`change_points`, the change-point test (Otava's idea, simplified): binary segmentation. Find the split of the
series that maximises |t| between the two sides, keep it if significant, recurse into both sides; then re-measure
each change against its neighbouring segments, as Otava does, and drop those under `min_change`.
- Why not E-divisive with a permutation test (Otava's ancestor): energy statistics look for any change in the
  distribution, which costs power against what a throughput regression is, a change of level; and permutations
  are random (seeded or not, the answer depends on the draw) and slow. Otava itself replaced them with a t-test.
- Why not Perfherder's t-test between fixed windows (12 before, 12 after, t > 7): it needs a dozen new results
  before it can speak. The split search tests every split, and the lookback test covers the newest few values.
- Significance of the best split is not that of one t-test: the maximum over many correlated splits is larger.
  The p-value is bounded analytically with the upcrossing (Davies-type) bound: P(max |Z_k| > c) <= 2 (1 - Phi(c))
  + 2 phi(c) / sqrt(pi) * sum_k sqrt(1 - rho_k), rho_k = corr(Z_k, Z_k+1) = sqrt(k (n-k-1) / ((k+1) (n-k))) for
  two-sample statistics, c the normal equivalent of the best t. It is close to the simulated truth (within ~1.5x
  at the 1% level for 15-60 values; Bonferroni over the splits is 1.5-3x too conservative) and costs O(n).

Both tests work on log throughput, as `compare` does: effects are relative, a constant factor changes nothing,
and every change is reported relative (-0.074 is 7.4% slower). Both require a minimum relative change
(`min_change`, 2% like `compare`'s min_effect) so a series with almost no spread does not flag 0.3% moves. The
defaults were set with `bench/regression_sim.py`; its figures are in bench/README.md.
"""

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .tdist import t_upper_tail

LOOKBACK = "lookback"
CHANGE_POINT = "change_point"
REGRESSION = "regression"
IMPROVEMENT = "improvement"

# Spread below 0.01% is a benchmark reporting rounded or repeated numbers, not a real precision; without a floor a
# perfectly flat history would make any later wiggle infinitely significant (min_change guards that too).
_SD_FLOOR = 1e-4
# Below this tail probability the normal quantile is out of float range; z is capped there (~37).
_P_FLOOR = 1e-300
_NORMAL = statistics.NormalDist()


@dataclass(frozen=True)
class Metric:
    """What a history series measures: `key` is stored with suspicions and flags, `label` and `unit` name it in
    messages, `digits` is how many decimals its values are shown with."""

    key: str
    label: str
    unit: str
    digits: int

    def show(self, value: float) -> str:
        return f"{value:.{self.digits}f}"


THROUGHPUT = Metric("throughput", "Throughput", "tok/s", 1)
# Output tokens per verify step (token-weighted over the cell's requests): a change of draft, of SGLang or of the
# prompts moves it without any change of speed, and a speed change of the host leaves it where it was.
ACCEPTANCE = Metric("acceptance", "Accept length", "tokens/step", 2)
METRICS = {metric.key: metric for metric in (THROUGHPUT, ACCEPTANCE)}


@dataclass(frozen=True)
class HistoryPoint:
    """One result in a series: `key` names the series (host, config hash, profile, concurrency), `value` is its
    output throughput in tok/s, `at` anything that sorts in time order (an ISO timestamp)."""

    key: str
    value: float
    at: str


@dataclass(frozen=True)
class RegressionFlag:
    """A change in a series of throughputs.

    `index` is the first value of the new level: the start of the anomalous newest values (kind "lookback") or
    the first value after a change point (kind "change_point"). `direction` is "regression" for lower
    throughput, "improvement" for higher. `baseline_mean` and `new_value_or_mean` are arithmetic means in tok/s
    of the values before and from `index`; `change` is new / baseline - 1. `score` is signed, negative for lower
    throughput: the normal-equivalent z for "lookback", the two-sample t statistic for "change_point".
    """

    index: int
    kind: str
    direction: str
    baseline_mean: float
    new_value_or_mean: float
    change: float
    score: float
    message: str


def check_latest(
    values: Sequence[float],
    *,
    lookback: int = 20,
    z_threshold: float = 2.9,
    min_history: int = 8,
    min_change: float = 0.02,
    recent: int = 5,
    metric: Metric = THROUGHPUT,
) -> RegressionFlag | None:
    """Whether the newest values stand out from the `lookback` values before them; None when not.

    For each w in 1..`recent`, the newest w values are tested against up to `lookback` values before them, if at
    least `min_history` are there (so a series needs min_history + 1 values for any flag). The flag is the w with
    the largest |z| among those with |z| >= `z_threshold` and relative change >= `min_change`. z is two-sided: 2.9
    is a tail probability of 0.37% per w. Raises ValueError for a value that is not positive and finite, or for
    options out of range.
    """
    if not 2 <= min_history <= lookback or recent < 1:
        raise ValueError(f"need 2 <= min_history <= lookback and recent >= 1, got {min_history}, {lookback}, {recent}")
    logs = _logs(values)
    n = len(logs)
    best: RegressionFlag | None = None
    for w in range(1, recent + 1):
        start = n - w
        history_start = max(0, start - lookback)
        if start - history_start < min_history:
            break  # a longer tail leaves even less history
        t, df = _pooled_t(logs, history_start, start, n)
        z = _normal_equivalent(t, df)
        base_mean = statistics.fmean(values[history_start:start])
        new_mean = statistics.fmean(values[start:])
        change = new_mean / base_mean - 1
        if abs(z) < z_threshold or abs(change) < min_change or (best is not None and abs(z) <= abs(best.score)):
            continue
        what = "the newest value" if w == 1 else f"the newest {w} values"
        best = _flag(
            start,
            LOOKBACK,
            base_mean,
            new_mean,
            z,
            f"{what} against the {start - history_start} before (z = {z:.1f})",
            metric,
        )
    return best


def change_points(
    values: Sequence[float], *, min_segment: int = 3, alpha: float = 0.004, min_change: float = 0.02
) -> list[RegressionFlag]:
    """Changes of level over the whole series, in index order; empty below 2 * min_segment values.

    Each segment between changes holds at least `min_segment` values. A split is kept when the bound on its
    p-value, corrected for having searched every split, is below `alpha`, and when the two neighbouring segments
    differ by at least `min_change`. Deterministic. Raises ValueError for a value that is not positive and finite
    or for min_segment < 2.
    """
    if min_segment < 2:
        raise ValueError(f"min_segment must be at least 2, got {min_segment}")
    logs = _logs(values)
    found = []
    pending = [(0, len(logs))]
    while pending:
        low, high = pending.pop()
        split = _best_split(logs, low, high, min_segment)
        if split is None:
            continue
        index, t = split
        if _max_t_p_value(t, high - low, min_segment) >= alpha:
            continue
        found.append(index)
        pending += [(low, index), (index, high)]

    # Re-measure each change against its neighbours, dropping the smallest under min_change until none is left:
    # one removed boundary merges two segments, which changes the neighbours' means.
    splits = sorted(found)
    while True:
        bounds = [0, *splits, len(logs)]
        changes = [
            abs(
                statistics.fmean(values[bounds[i + 1] : bounds[i + 2]])
                / statistics.fmean(values[bounds[i] : bounds[i + 1]])
                - 1
            )
            for i in range(len(splits))
        ]
        if not changes or min(changes) >= min_change:
            break
        del splits[changes.index(min(changes))]

    flags = []
    for i, index in enumerate(splits):
        low, high = bounds[i], bounds[i + 2]
        t, _ = _pooled_t(logs, low, index, high)
        flags.append(
            _flag(
                index,
                CHANGE_POINT,
                statistics.fmean(values[low:index]),
                statistics.fmean(values[index:high]),
                t,
                f"change point: {index - low} values before, {high - index} after (t = {t:.1f})",
            )
        )
    return flags


def assess_series(
    values: Sequence[float],
    *,
    lookback: int = 20,
    z_threshold: float = 2.9,
    min_history: int = 8,
    recent: int = 5,
    min_segment: int = 3,
    alpha: float = 0.004,
    min_change: float = 0.02,
) -> list[RegressionFlag]:
    """Change points and the lookback flag for a series, in index order; what to call on each new result.

    A lookback flag is left out when a change point in the same direction lies within `recent` values of it:
    both describe the same step, and the change point locates it better. The options are those of
    `check_latest` and `change_points`.

    Flags describe the series as it stands, so a step is reported again on every later call, possibly one index
    off as more values arrive (and first as "lookback", later as "change_point"). Whoever stores flags should
    treat a flag in the same direction within `min_segment` values of a stored one as the same finding.
    """
    flags = change_points(values, min_segment=min_segment, alpha=alpha, min_change=min_change)
    latest = check_latest(
        values,
        lookback=lookback,
        z_threshold=z_threshold,
        min_history=min_history,
        min_change=min_change,
        recent=recent,
    )
    if latest is not None and not any(
        f.direction == latest.direction and abs(f.index - latest.index) <= recent for f in flags
    ):
        flags.append(latest)
    return sorted(flags, key=lambda f: f.index)


def _logs(values: Sequence[float]) -> list[float]:
    for value in values:
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"a history value must be positive and finite, got {value!r}")
    if not values:
        return []
    # Relative to the first value: a common factor cancels before the log, so scaling a series by a constant
    # moves no decision by rounding, and the numbers stay small for the sums of squares.
    first = values[0]
    return [math.log(value / first) for value in values]


def _pooled_t(logs: Sequence[float], low: int, split: int, high: int) -> tuple[float, int]:
    """t statistic of mean(logs[split:high]) - mean(logs[low:split]) on the pooled spread, and its df."""
    left, right = logs[low:split], logs[split:high]
    left_mean, right_mean = statistics.fmean(left), statistics.fmean(right)
    squares = sum((x - left_mean) ** 2 for x in left) + sum((x - right_mean) ** 2 for x in right)
    df = high - low - 2
    sd = max(math.sqrt(squares / df), _SD_FLOOR)
    return (right_mean - left_mean) / (sd * math.sqrt(1 / len(left) + 1 / len(right))), df


def _best_split(logs: Sequence[float], low: int, high: int, min_segment: int) -> tuple[int, float] | None:
    """The split of logs[low:high] with the largest |t|, by running sums: O(n) per segment."""
    n = high - low
    if n < 2 * min_segment:
        return None
    sums, squares = [0.0], [0.0]
    for x in logs[low:high]:
        sums.append(sums[-1] + x)
        squares.append(squares[-1] + x * x)
    best: tuple[int, float] | None = None
    for k in range(min_segment, n - min_segment + 1):
        left_mean, right_mean = sums[k] / k, (sums[n] - sums[k]) / (n - k)
        within = squares[k] - k * left_mean**2 + (squares[n] - squares[k]) - (n - k) * right_mean**2
        sd = max(math.sqrt(max(within, 0.0) / (n - 2)), _SD_FLOOR)
        t = (right_mean - left_mean) / (sd * math.sqrt(1 / k + 1 / (n - k)))
        if best is None or abs(t) > abs(best[1]):
            best = (low + k, t)
    return best


def _max_t_p_value(t: float, n: int, min_segment: int) -> float:
    """Bound on P(max over splits of |t| >= |t|) for n values with no change; see the module docstring."""
    single = min(1.0, 2 * t_upper_tail(abs(t), n - 2))
    splits = n - 2 * min_segment + 1
    z = _normal_equivalent(t, n - 2)
    crossings = sum(
        math.sqrt(1 - math.sqrt(k * (n - k - 1) / ((k + 1) * (n - k)))) for k in range(min_segment, n - min_segment)
    )
    upcrossing = single + 2 * _NORMAL.pdf(z) / math.sqrt(math.pi) * crossings
    return min(1.0, single * splits, upcrossing)


def _normal_equivalent(t: float, df: int) -> float:
    """The signed normal z with the same two-sided tail probability as t on df degrees of freedom."""
    tail = max(t_upper_tail(abs(t), df), _P_FLOOR)
    return math.copysign(-_NORMAL.inv_cdf(tail), t) if tail < 0.5 else 0.0


def _flag(
    index: int,
    kind: str,
    base_mean: float,
    new_mean: float,
    score: float,
    detail: str,
    metric: Metric = THROUGHPUT,
) -> RegressionFlag:
    change = new_mean / base_mean - 1
    # Lower is worse for every metric kept (throughput, accept length).
    direction = REGRESSION if change < 0 else IMPROVEMENT
    verb = "fell" if change < 0 else "rose"
    levels = f"{metric.show(base_mean)} -> {metric.show(new_mean)} {metric.unit}"
    message = f"{metric.label} {verb} {abs(change):.1%} from index {index}: {levels}; {detail}."
    return RegressionFlag(index, kind, direction, base_mean, new_mean, change, score, message)
