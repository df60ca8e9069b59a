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


# The most decimals a ratio's bounds are shown with: past this the bound is 1 to any reader's purpose.
MAX_RATIO_DECIMALS = 4


def ratio_bounds_text(low: float, high: float, decimals: int = 2) -> tuple[str, str]:
    """The bounds of a ratio's interval as text, at `decimals` places or more: where rounding would make an
    interval that excludes 1 read as reaching it ([0.991, 0.997] as "[0.99, 1.00]"), or one that holds 1 read as
    excluding it, a decimal is added until the text says what the numbers say. Past MAX_RATIO_DECIMALS a bound that
    still reads 1 is rounded away from it (0.99998 reads 0.9999)."""
    for places in range(decimals, MAX_RATIO_DECIMALS + 1):
        texts = [f"{bound:.{places}f}" for bound in (low, high)]
        if all(
            _side_of_one(float(text)) == _side_of_one(bound) for text, bound in zip(texts, (low, high), strict=True)
        ):
            return texts[0], texts[1]
    return _away_from_one(low, MAX_RATIO_DECIMALS), _away_from_one(high, MAX_RATIO_DECIMALS)


def _reads_as(text: str, bound: float) -> bool:
    """Whether `text` stands on the same side of 1 as `bound` (or at 1 as it does)."""
    return _side_of_one(float(text)) == _side_of_one(bound)


def _away_from_one(bound: float, places: int) -> str:
    text = f"{bound:.{places}f}"
    if _reads_as(text, bound):
        return text
    scale = 10**places
    directed = math.floor(bound * scale) / scale if bound < 1 else math.ceil(bound * scale) / scale
    return f"{directed:.{places}f}"


def ratio_text(
    ratio: float, low: float | None, high: float | None, decimals: int = 2, missing: str = ", no interval"
) -> str:
    """A ratio and its interval ("1.06x [0.98, 1.15]") as every page, the API's `said` and the CLI print them; the
    ratio keeps as many decimals as its bounds need. Without an interval, `missing` follows the ratio."""
    if low is None or high is None:
        return f"{ratio:.{decimals}f}x{missing}"
    low_text, high_text = ratio_bounds_text(low, high, decimals)
    places = len(low_text.partition(".")[2])
    return f"{ratio:.{places}f}x [{low_text}, {high_text}]"


def _side_of_one(value: float) -> int:
    return (value > 1) - (value < 1)
