"""The racing rule of an auto-tuning study at one concurrency (pure): which measured config leads, which are
clearly worse and measured no more, which are still in contention, and whether the leader is known to the
precision wanted.

Samples are output tok/s, one per launch of a config, on the log scale like `comparison` (effects are
multiplicative). A config measured once has no spread of its own; GPU noise is much the same for every config of
one host and concurrency, so the interval of each config uses the spread pooled over every config measured more
than once (the baseline is, in every round), or `prior_sigma` (relative) while none is. The interval is the 95%
Student t interval of `comparison.CONFIDENCE` with the pooled degrees of freedom.

- eliminated: the config's upper bound is below the leader's lower bound (clearly worse: never measured again);
- contender: not eliminated, and its upper bound is more than `tolerance` above the leader's mean: it might still
  be better than the leader by more than the precision wanted, so it is worth another launch;
- settled: the leader's own interval is no wider than `tolerance` each side and no other config is a contender.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .comparison import CONFIDENCE
from .tdist import t_quantile

# What the relative spread of one launch's throughput is taken to be before any config was launched twice.
DEFAULT_PRIOR_SIGMA = 0.02


@dataclass(frozen=True)
class Standing:
    """One config at one concurrency: its geometric-mean tok/s, launches and 95% interval (tok/s)."""

    mean: float
    n: int
    low: float
    high: float


@dataclass(frozen=True)
class Race:
    leader: str | None
    standings: dict[str, Standing] = field(default_factory=dict)
    eliminated: frozenset[str] = frozenset()
    contenders: frozenset[str] = frozenset()
    settled: bool = False

    def within(self, key: str, tolerance: float) -> bool:
        """Whether `key`'s mean is within `tolerance` of the leader's."""
        if self.leader is None or key not in self.standings:
            return False
        return self.standings[key].mean >= self.standings[self.leader].mean * (1 - tolerance)


def race(
    samples: Mapping[str, Sequence[float]],
    *,
    tolerance: float,
    prior_sigma: float = DEFAULT_PRIOR_SIGMA,
    min_leader_launches: int = 2,
) -> Race:
    """The standing of every config of `samples` (config -> tok/s per launch; configs without samples and
    non-positive samples are left out) against the leader."""
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance}")
    logs = {key: [math.log(v) for v in values if v > 0] for key, values in samples.items()}
    logs = {key: values for key, values in logs.items() if values}
    if not logs:
        return Race(leader=None)
    sigma, df = _pooled_sigma(logs.values(), prior_sigma)
    t = t_quantile(0.5 + CONFIDENCE / 2, df)
    standings: dict[str, Standing] = {}
    log_bounds: dict[str, tuple[float, float, float]] = {}
    for key, values in logs.items():
        mean = sum(values) / len(values)
        half = t * sigma / math.sqrt(len(values))
        log_bounds[key] = (mean, mean - half, mean + half)
        standings[key] = Standing(math.exp(mean), len(values), math.exp(mean - half), math.exp(mean + half))
    leader = max(log_bounds, key=lambda key: (log_bounds[key][0], -len(logs[key])))
    lead_mean, lead_low, lead_high = log_bounds[leader]
    margin = math.log(1 + tolerance)
    eliminated = frozenset(key for key, (_, _, high) in log_bounds.items() if high < lead_low)
    contenders = frozenset(
        key
        for key, (_, _, high) in log_bounds.items()
        if key != leader and key not in eliminated and high > lead_mean + margin
    )
    precise = lead_high - lead_mean <= margin and len(logs[leader]) >= min_leader_launches
    return Race(leader, standings, eliminated, contenders, settled=precise and not contenders)


def _pooled_sigma(groups: Iterable[list[float]], prior_sigma: float) -> tuple[float, float]:
    """(sigma, degrees of freedom) of log throughput pooled over the groups of two or more samples; the prior
    (with the degrees of freedom of a normal quantile) while there is none."""
    squares, df = 0.0, 0
    for values in groups:
        if len(values) >= 2:
            mean = sum(values) / len(values)
            squares += sum((v - mean) ** 2 for v in values)
            df += len(values) - 1
    if df == 0:
        return math.log(1 + prior_sigma), 1000.0
    # A pooled spread of zero (identical samples) would make every interval a point: keep a floor of a tenth of
    # the prior, well below any real GPU's launch-to-launch spread.
    return max(math.sqrt(squares / df), math.log(1 + prior_sigma) / 10), float(df)
