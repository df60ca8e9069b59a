"""Student's t distribution, stdlib only: the quantile (for intervals) and the upper tail (for p-values).

The quantile is found by safeguarded Newton steps on the incomplete-beta form of the tail, which keeps the package
free of numpy/scipy.
"""

import functools
import math
import statistics

_NORMAL = statistics.NormalDist()


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t distribution with df > 0 degrees of freedom (df may be fractional)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not df > 0:
        raise ValueError(f"df must be positive, got {df}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    if p == 0.5:
        return 0.0
    if df > 1e7:
        # Beyond this the t and normal quantiles agree to ~1e-7, and the continued fraction gets slow.
        return _NORMAL.inv_cdf(p)
    tail = 1 - p
    # Newton's method on the tail from the Cornish-Fisher expansion, a few steps instead of ~40 bisections (the
    # comparison page calls this for every cell). The tail is monotone, so every evaluation also narrows a
    # bracket; a step that leaves it falls back to bisection.
    z = _NORMAL.inv_cdf(p)
    t = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    t = max(t, 1e-12)
    low, high = 0.0, math.inf
    log_density_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(200):
        excess = t_upper_tail(t, df) - tail
        if excess > 0:
            low = t
        else:
            high = t
        density = math.exp(log_density_norm - (df + 1) / 2 * math.log1p(t * t / df))
        step = t + excess / density if density > 0 else math.nan
        if not low < step < high:
            step = (low + high) / 2 if math.isfinite(high) else 2 * max(t, 1.0)
        if abs(step - t) <= 1e-12 * max(abs(step), 1.0):
            return step
        t = step
    return t


def t_upper_tail(t: float, df: float) -> float:
    """P(T > t) for t >= 0: half the regularized incomplete beta I_x(df/2, 1/2) at x = df / (df + t^2)."""
    t2 = t * t
    # 1 - x is computed directly, not by subtraction, to keep precision when x is close to 1.
    return _regularized_beta(df / (df + t2), t2 / (df + t2), df / 2, 0.5) / 2


def _regularized_beta(x: float, y: float, a: float, b: float) -> float:
    """I_x(a, b), with y = 1 - x supplied by the caller."""
    if x <= 0:
        return 0.0
    if y <= 0:
        return 1.0
    # The continued fraction converges fast only left of the distribution's bulk; use the mirror there.
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _regularized_beta(y, x, b, a)
    log_front = a * math.log(x) + b * math.log(y) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    return math.exp(log_front) / a * _beta_continued_fraction(x, a, b)


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """1 / (1 + d1 / (1 + d2 / (1 + ...))) for the incomplete beta, by the modified Lentz method.

    d(2m+1) = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)),  d(2m) = m(b-m) x / ((a+2m-1)(a+2m)).
    """
    tiny = 1e-300
    value = tiny
    c, d = value, 0.0
    for j in range(1, 100_000):
        if j == 1:
            numerator = 1.0
        else:
            k = j - 1  # index of the d term in the fraction
            m = k // 2
            if k % 2:
                numerator = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
            else:
                numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + numerator * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1.0 + numerator / c
        if abs(c) < tiny:
            c = tiny
        delta = c * d
        value *= delta
        if abs(delta - 1) < 1e-15:
            return value
    raise ArithmeticError(f"incomplete beta did not converge for x={x}, a={a}, b={b}")
