"""Speedup of candidate server configs over a baseline, with an honest 95% confidence interval.

Input is one output-throughput sample (tok/s) per (config, concurrency, launch, pass). For each candidate and
concurrency, `compare` reports the ratio candidate / baseline, its 95% confidence interval, and a verdict.

Method: a Welch t interval on log throughput.
- Throughput effects are multiplicative (a config is "12% faster", whatever the absolute level), so we work
  with log(tok/s). The difference of mean logs is the log of the ratio of geometric means; its interval is
  symmetric there, and exponentiating the bounds gives a ratio interval that is always positive and that
  inverts exactly when baseline and candidate swap. An interval on the plain ratio has none of these.
- Welch, not a pooled t: launch-to-launch variance differs between configs (speculative decoding adds
  acceptance-length noise on top of the machine's), so equal variances are not assumed; the degrees of freedom
  come from Welch-Satterthwaite.
- Closed form, not a bootstrap: a benchmark gives a handful of samples per cell, too few for resampling to
  mean much, and a bootstrap is random, so the numbers on a page would change on reload. This is cheap and
  deterministic.

The reported `speedup` is therefore the ratio of geometric means, the centre of the interval; it differs from
candidate_tok_s / baseline_tok_s (arithmetic means) only by second-order terms in the spread.

Every pass counts as one sample. Passes of one launch share that launch's state, so with few launches the
interval is somewhat optimistic about launch-to-launch variation; interleaved launches keep machine drift out
of the ratio itself.

`runs_needed` is the usual two-sample size estimate on the log scale: the smallest n per side with
(t_0.975 + z_0.8) * sqrt(2 s^2 / n) < |log speedup|, s^2 the pooled log variance; that is, the n at which the
interval would exclude 1 four times in five if the observed ratio and spread are the truth. The t quantile is
computed in `tdist` (bisection on the incomplete-beta form of the t distribution) to keep the module stdlib-only.
"""

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from .equivalence import OUTPUTS_DIFFER
from .tdist import t_quantile

FASTER = "faster"
SLOWER = "slower"
INCONCLUSIVE = "inconclusive"

CONFIDENCE = 0.95
# runs_needed aims at a sample size that settles the verdict with this probability, not a coin flip.
POWER = 0.8
MAX_RUNS_NEEDED = 1000


@dataclass(frozen=True)
class Sample:
    config: str
    concurrency: int
    launch: int
    pass_index: int
    output_throughput: float
    # The pass's accept length (token-weighted, Measurement.accept_length), for the acceptance-collapse rule.
    accept_length: float | None = None


@dataclass(frozen=True)
class ComparisonRow:
    """One candidate at one concurrency against the baseline.

    `ci_low`/`ci_high` bound the ratio with 95% confidence; None when a side has fewer than two samples.
    `runs_needed` is set only on inconclusive rows: samples per side that would likely (80%) settle the
    verdict if the observed ratio and spread held, capped at 1000; None when no amount would (effect below
    min_effect) or the spread is unknown.
    """

    candidate: str
    concurrency: int
    baseline_tok_s: float
    candidate_tok_s: float
    speedup: float
    ci_low: float | None
    ci_high: float | None
    verdict: str
    baseline_n: int
    candidate_n: int
    runs_needed: int | None
    # The speed verdict itself (faster, slower, inconclusive), kept when `verdict` says "outputs differ" instead.
    speed_verdict: str = ""


@dataclass(frozen=True)
class _LogSummary:
    n: int
    mean_tok_s: float
    log_mean: float
    log_var: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> "_LogSummary":
        logs = [math.log(v) for v in values]
        log_mean = statistics.fmean(logs)
        log_var = sample_variance(logs, log_mean) if len(logs) >= 2 else None
        return cls(len(values), statistics.fmean(values), log_mean, log_var)


def sample_variance(values: Sequence[float], mean: float) -> float:
    """The unbiased sample variance in plain floats: `statistics.variance` sums exact Fractions, which costs
    ~30 us a call, and the comparison page calls this for every cell (the extra exactness changes nothing here)."""
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def is_usable(output_throughput: float | None) -> bool:
    """Whether a pass's output throughput says anything about speed: positive and finite. A pass whose requests all
    failed (0 tok/s) or a value that is not a number is no sample; it is shown in the measurements, never averaged."""
    return output_throughput is not None and math.isfinite(output_throughput) and output_throughput > 0


def compare_configs(
    samples: Iterable[Sample],
    *,
    baseline: str,
    candidates: Sequence[str],
    outputs_differ: Collection[str] = (),
    min_effect: float = 0.02,
) -> list[ComparisonRow]:
    """The comparison every page, the API, the experiments table and a study's recommendation show: `compare` over
    the usable samples (`is_usable`), then the output-equivalence gate. A candidate in `outputs_differ` (its outputs
    parted from the baseline's at temperature 0) has every verdict replaced by OUTPUTS_DIFFER: its speed is no win,
    however fast it ran."""
    usable = [sample for sample in samples if is_usable(sample.output_throughput)]
    rows = compare(usable, baseline=baseline, candidates=candidates, min_effect=min_effect)
    gated = set(outputs_differ)
    return [
        dataclasses.replace(row, verdict=OUTPUTS_DIFFER, speed_verdict=row.verdict) if row.candidate in gated else row
        for row in rows
    ]


def best_row(rows: Sequence[ComparisonRow]) -> ComparisonRow | None:
    """The row with the highest speedup among candidates whose outputs match (among all only if none does): what a
    one-line summary shows as the best result."""
    honest = [row for row in rows if row.verdict != OUTPUTS_DIFFER] or list(rows)
    return max(honest, key=lambda row: row.speedup) if honest else None


def compare(
    samples: Iterable[Sample], *, baseline: str, candidates: Sequence[str], min_effect: float = 0.02
) -> list[ComparisonRow]:
    """Compare each candidate with the baseline at every concurrency both were measured at.

    Rows come in candidate order, then ascending concurrency; a cell lacking baseline or candidate samples is
    skipped. Verdict "faster" needs the whole interval above 1 and speedup >= 1 + min_effect; "slower" needs
    it wholly below 1 and speedup <= 1 - min_effect; anything else, including a side with a single sample, is
    "inconclusive". Raises ValueError for a throughput that is not positive and finite (a failed pass must be
    left out by the caller, not averaged in) or for min_effect outside [0, 1).
    """
    if not 0 <= min_effect < 1:
        raise ValueError(f"min_effect must be in [0, 1), got {min_effect}")
    wanted = {baseline, *candidates}
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    for sample in samples:
        if sample.config not in wanted:
            continue
        if not (math.isfinite(sample.output_throughput) and sample.output_throughput > 0):
            raise ValueError(f"output throughput must be positive and finite: {sample!r}")
        cells[sample.config, sample.concurrency].append(sample.output_throughput)

    baseline_levels = {level for (config, level) in cells if config == baseline}
    rows = []
    # A config compared with itself says nothing (and a candidate that is the baseline is no candidate).
    for candidate in (name for name in candidates if name != baseline):
        levels = sorted(baseline_levels & {level for (config, level) in cells if config == candidate})
        for level in levels:
            base = _LogSummary.of(cells[baseline, level])
            cand = _LogSummary.of(cells[candidate, level])
            rows.append(_compare_cell(candidate, level, base, cand, min_effect))
    return rows


def _compare_cell(
    candidate: str, concurrency: int, base: _LogSummary, cand: _LogSummary, min_effect: float
) -> ComparisonRow:
    log_ratio = cand.log_mean - base.log_mean
    speedup = math.exp(log_ratio)
    half_width = _welch_half_width(base, cand)
    ci_low = ci_high = None
    if half_width is not None:
        ci_low, ci_high = math.exp(log_ratio - half_width), math.exp(log_ratio + half_width)

    if ci_low is not None and ci_low > 1 and speedup >= 1 + min_effect:
        verdict = FASTER
    elif ci_high is not None and ci_high < 1 and speedup <= 1 - min_effect:
        verdict = SLOWER
    else:
        verdict = INCONCLUSIVE
    runs_needed = _runs_needed(base, cand, speedup, min_effect) if verdict == INCONCLUSIVE else None
    return ComparisonRow(
        candidate=candidate,
        concurrency=concurrency,
        baseline_tok_s=base.mean_tok_s,
        candidate_tok_s=cand.mean_tok_s,
        speedup=speedup,
        ci_low=ci_low,
        ci_high=ci_high,
        verdict=verdict,
        baseline_n=base.n,
        candidate_n=cand.n,
        runs_needed=runs_needed,
    )


def _welch_half_width(base: _LogSummary, cand: _LogSummary) -> float | None:
    if base.log_var is None or cand.log_var is None:
        return None
    base_se2 = base.log_var / base.n
    cand_se2 = cand.log_var / cand.n
    se2 = base_se2 + cand_se2
    if se2 == 0:
        # Identical repeats on both sides: nothing to widen the interval with.
        return 0.0
    denominator = base_se2**2 / (base.n - 1) + cand_se2**2 / (cand.n - 1)
    # The squares can underflow for vanishing spreads; the pooled df is then as good as any.
    df = se2**2 / denominator if denominator > 0 else base.n + cand.n - 2
    return t_quantile(0.5 + CONFIDENCE / 2, df) * math.sqrt(se2)


def _runs_needed(base: _LogSummary, cand: _LogSummary, speedup: float, min_effect: float) -> int | None:
    # Inside the min_effect band the verdict can never become faster or slower, however many runs.
    if 1 - min_effect < speedup < 1 + min_effect:
        return None
    pooled_df = base.n + cand.n - 2
    if pooled_df < 1:
        return None
    # A side with one sample contributes no spread: (n - 1) weighs it out.
    pooled_var = ((base.n - 1) * (base.log_var or 0.0) + (cand.n - 1) * (cand.log_var or 0.0)) / pooled_df
    effect = abs(math.log(speedup))
    z_power = statistics.NormalDist().inv_cdf(POWER)
    t_level = 0.5 + CONFIDENCE / 2

    def settles(n: int) -> bool:
        # The interval excludes 1 with probability POWER when the true log ratio is `effect`.
        return (t_quantile(t_level, 2 * n - 2) + z_power) * math.sqrt(2 * pooled_var / n) < effect

    if not settles(MAX_RUNS_NEEDED):
        return MAX_RUNS_NEEDED
    low, high = 2, MAX_RUNS_NEEDED  # settles(high) holds; find the smallest such n (monotone in n)
    while low < high:
        mid = (low + high) // 2
        if settles(mid):
            high = mid
        else:
            low = mid + 1
    # The row is unsettled with what we have, so the smaller side needs at least one more sample.
    return min(MAX_RUNS_NEEDED, max(low, min(base.n, cand.n) + 1))


def launches_to_settle(row: ComparisonRow, passes_per_launch: int) -> int | None:
    """More launches of every config (each giving `passes_per_launch` samples per side) that would bring the
    smaller side of an inconclusive row to `runs_needed`; None where no amount would."""
    if row.runs_needed is None:
        return None
    missing = row.runs_needed - min(row.baseline_n, row.candidate_n)
    return max(1, math.ceil(missing / max(1, passes_per_launch)))


def break_even_concurrency(rows: Sequence[ComparisonRow], candidate: str) -> int | None:
    """The lowest concurrency at which `candidate`'s speedup point estimate drops below 1.0.

    That is the first level, going up, where speculation stops paying; it is the lowest measured level when
    the candidate never pays (`never_pays` tells that case apart). None when the speedup is >= 1.0 at every
    measured level (or there are no rows).
    """
    for row in sorted((r for r in rows if r.candidate == candidate), key=lambda r: r.concurrency):
        if row.speedup < 1.0:
            return row.concurrency
    return None


def never_pays(rows: Sequence[ComparisonRow], candidate: str) -> bool:
    """True when `candidate` was measured and its speedup point estimate is below 1.0 at every measured level.

    Such a candidate has no break-even concurrency: it stops paying nowhere because it never paid, so pages say
    "never pays at the measured concurrencies" rather than marking its lowest level as a break-even point.
    """
    own = [r for r in rows if r.candidate == candidate]
    return bool(own) and all(r.speedup < 1.0 for r in own)


def settling_note(row: ComparisonRow, passes_per_launch: int, min_effect: float = 0.02) -> str:
    """What an inconclusive row needs, in words ("" for a settled row): the samples per side and the launches
    that would likely settle it, or why no number of runs would."""
    if row.verdict != INCONCLUSIVE:
        return ""
    have = f"has {row.baseline_n} and {row.candidate_n}"
    if row.runs_needed is None:
        if min(row.baseline_n, row.candidate_n) < 2 and not (1 - min_effect < row.speedup < 1 + min_effect):
            return f"needs at least 2 samples per side to measure the spread, {have}"
        return f"within {min_effect:.0%} of the baseline: more runs would not make it faster or slower"
    launches = launches_to_settle(row, passes_per_launch) or 0
    more = f"about {launches} more launch{'es' if launches != 1 else ''}"
    if row.runs_needed >= MAX_RUNS_NEEDED:
        return f"needs {MAX_RUNS_NEEDED} or more samples per side, {have}: {more}"
    return f"needs ~{row.runs_needed} samples per side, {have}: {more}"
