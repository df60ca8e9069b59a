"""The mean of a cell's samples with its 95% Student t interval, and the point that carries both to the pages.

A cell is one config at one concurrency; its samples are every pass of every launch, the same samples the
speedup uses.
"""

import functools
import math
import statistics
from collections.abc import Sequence

from .comparison import CONFIDENCE, sample_variance
from .tdist import t_quantile

# (concurrency, mean, low, high): low and high bound the 95% interval of the mean, None when unknown.
Point = tuple[int, float, float | None, float | None]


@functools.lru_cache(maxsize=256)
def _t975(df: int) -> float:
    # Integer degrees of freedom (n - 1) repeat across cells; the quantile is a bisection worth caching.
    return t_quantile(0.5 + CONFIDENCE / 2, df)


def mean_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """The mean of `values` and its 95% Student t interval; no interval for fewer than two values."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    half_width = _t975(len(values) - 1) * math.sqrt(sample_variance(values, mean) / len(values))
    return mean, mean - half_width, mean + half_width
