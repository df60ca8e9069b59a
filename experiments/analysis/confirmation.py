"""Confirm before alerting: a suspected change of level becomes a flag only when new values support it.

Checking a series as each result arrives at a fixed per-check false-alarm rate cannot keep its whole life quiet:
at 1.6% per check, a stable series checked 60 times is falsely flagged at least once 44% of the time. Lowering
the per-check rate far enough (~0.1%) would leave a 5% step under 2% noise unseen for many results. So detection
is split in two stages, and what is controlled is the life of a series, not one check:

1. **Suspicion** (`suspect`): the lookback test of `history.check_latest` (the newest 1..`recent` values against
   the `lookback` before them) at z 2.7: sensitive enough that a 5% step under 2% noise is suspected within 1-3
   results, at the price of a suspicion every ~60 results of a stable series. A suspicion only queues a
   confirming run; nobody is told.
2. **Confirmation** (`SuspectedChange.log_likelihood_ratio`, `verdict`): a sequential probability ratio test
   (Wald) on the values that arrive *after* the suspicion: the confirming runs, then any later result. The values
   that raised the suspicion are left out: they were selected for being extreme, and reusing them would confirm
   noise. The statistic is the mean of the new values against the old level, in log throughput, on its
   predictive scale s * sqrt(1/k + 1/n) (k new values, n old ones: the old level's error is shared by all new
   values), with Student's t density on n - 1 df, so a short or noisy history cannot make one value decisive.
   H0: no change. H1: a change in the suspected direction, a mixture of sizes from half the suspected change to
   all of it (never under `min_change`): the suspected size is biased high by the selection, and a test against
   it alone leaves a real but smaller step undecided. The test confirms at log((1 - miss) / false_confirm) and
   dismisses at log(miss / (1 - false_confirm)). For a likelihood ratio of independent values, mixture or not,
   Wald's and Ville's inequalities bound P(confirm | no change) by false_confirm whatever the number of values
   it takes; the ratio here (of a mean against a shared, estimated reference) is one only approximately, so the
   bound is the design figure and the bench measures the truth.
   After `PATIENCE` values without a decision the suspicion is dismissed: a lingering one would block the next
   and be "confirmed" by some later, unrelated change.

Whole life: false flags per life <= (suspicions per stable life) x false_confirm, about 1.0 x 0.015 = 1.5% at
the defaults, if the old level were known. It is estimated, from values the suspicion chose for lying away from
the tail, so that is not the truth; the old level is therefore measured on every value since the last change
(not only the lookback window), which shrinks the bias, and the whole life is measured by simulation in
`bench/regression_sim.py` (2.0-3.4% of stable 60-result lives flagged on every seed tried, against 43.8% when each
check could flag). A real step that a confirmation dismisses is suspected again by the next result, so a miss
costs time, not the finding.

Why these defaults. The earlier ones (false_confirm 0.025, 5 confirming launches) flagged 5.2% of stable lives on
seeds 3, 11 and 23 (3.9% on seed 1): the selection bias roughly doubles the design figure, so a design figure of
2.5% sat on the 5% target and which side of it a bench run fell on was the seed's luck. false_confirm 0.015 puts
the design figure at 1.5% (measured 2.0-3.4%). A stricter test alone confirms later (confirm at log(0.95 / 0.015) =
4.1 instead of 3.6; 95.7% of -5% steps within 5 results on seed 11, on the edge of the 95% target), so the
confirming launches now run up to `PATIENCE`, the most values a suspicion may wait for anyway: every suspicion is
decided by its own launches, measured beside the suspect at once, not by the config's later ordinary results,
which is what wins the speed back (96-97% within 5 results on every seed) for ~1 more launch per 100 results.
The rule is one for every metric kept over history (`history.Metric`: throughput, accept length): both are
positive and move by relative steps, and the test is on the spread the series itself shows, so a quieter metric
(a cell's accept length varies ~1.6% on the simulated host, against ~2% for throughput) needs no settings of its
own; bench/README.md has the figures per seed for both.

Why not a CUSUM or a Bayesian online change-point detector over the raw stream: both need the pre-change level
and spread known (or a prior), and both alarm on the values they estimate from; the two stages spend extra
launches only where a change is suspected, which is the cheapest evidence a benchmark rig can buy, and the
confirming runs are interleaved with the experiment's other configs on the same host, so a host-wide change
shows in all of them (and becomes one flag, see `actions.review.do_raise_flag`).
Why not scipy: it is not a dependency, and a t density and Wald's thresholds are closed forms.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .history import THROUGHPUT, Metric, check_latest

CONFIRMED = "confirmed"
DISMISSED = "dismissed"
UNDECIDED = "undecided"
SUSPECTED = "suspected"

# Defaults chosen with bench/regression_sim.py (see "Why these defaults" above and bench/README.md).
SUSPECT_Z = 2.7
FALSE_CONFIRM = 0.015
MISS = 0.05
# Values after a suspicion that may leave it undecided: a suspicion that lingers would block the next one, and
# be "confirmed" by a later, unrelated change (the values after it would then mix two levels).
PATIENCE = 6
# Confirming launches per suspicion: as many as it may wait for values, so that its own launches decide it.
MAX_CONFIRMATIONS = PATIENCE
# How many newest values a suspicion may hold.
RECENT = 5
# The smallest relative change H1 is allowed to assume: a flag is about changes a team acts on.
MIN_CHANGE = 0.02
_SD_FLOOR = 1e-4
_MIXTURE = 3


@dataclass(frozen=True)
class SuspectedChange:
    """A suspected change: from `index` on, the series seems to sit at a new level.

    `baseline_mean` and `suspected_mean` are arithmetic means in tok/s of the history and of the suspected values;
    `change` is suspected / baseline - 1; `score` the lookback test's normal-equivalent z. `log_mean`,
    `log_sd` and `shift` define the two hypotheses in log throughput: H0 mean log_mean, H1 log_mean + shift.
    """

    index: int
    direction: str
    baseline_mean: float
    suspected_mean: float
    change: float
    score: float
    log_mean: float
    log_sd: float
    shift: float
    min_shift: float
    history_count: int
    df: int
    message: str

    def log_likelihood_ratio(self, values: Sequence[float]) -> float:
        """log of p(values | H1) / p(values | H0) for the values after the suspicion (tok/s, positive).

        H1 is a mixture: the new level is one of `_MIXTURE` equally likely sizes between `min_change` and the
        suspected change. The suspected size is biased high (the suspicion picked the most extreme tail), and a
        test against it alone leaves a real but smaller step undecided; a mixture likelihood ratio keeps Wald's
        (Ville's) bound on false confirmation whatever the mixture (Robbins' mixture SPRT).
        """
        logs = []
        for value in values:
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"a history value must be positive and finite, got {value!r}")
            logs.append(math.log(value))
        if not logs:
            return 0.0
        # The statistic is the mean of the new values against the old level, on the scale of its predictive
        # spread: the old level's error is shared by every new value, so k values are worth sqrt(1/k + 1/n) of the
        # spread, not sqrt((1 + 1/n) / k) as k independent ones would be.
        scale = self.log_sd * math.sqrt(1 / len(logs) + 1 / self.history_count)
        x = (statistics.fmean(logs) - self.log_mean) / scale
        null = _log_t_density(x, self.df)
        ratios = [_log_t_density(x - shift / scale, self.df) - null for shift in self.shifts]
        top = max(ratios)
        return top + math.log(statistics.fmean(math.exp(r - top) for r in ratios))

    @property
    def shifts(self) -> list[float]:
        """The sizes of H1's mixture, in log throughput, signed like the suspected change."""
        low, high = self.min_shift, self.shift
        return [low + (high - low) * i / (_MIXTURE - 1) for i in range(_MIXTURE)]


def _log_t_density(x: float, df: int) -> float:
    """Student's t log density up to a constant (the constant cancels in every ratio)."""
    return -(df + 1) / 2 * math.log1p(x * x / df)


def suspect(
    values: Sequence[float],
    *,
    lookback: int = 20,
    z_threshold: float = SUSPECT_Z,
    min_history: int = 8,
    min_change: float = MIN_CHANGE,
    recent: int = RECENT,
    metric: Metric = THROUGHPUT,
) -> SuspectedChange | None:
    """Whether the newest values suggest a change of level; None when not. `values` should start at the current
    level of the series (after its last confirmed change): `suspect_since` does that. The options are those of
    `history.check_latest`."""
    found = check_latest(
        values,
        lookback=lookback,
        z_threshold=z_threshold,
        min_history=min_history,
        min_change=min_change,
        recent=recent,
        metric=metric,
    )
    if found is None:
        return None
    # The old level is measured on every value since the last change, not only the lookback window: the
    # suspicion selected values whose history sat, by chance, away from the tail, and the longer the reference
    # the less that chance bias leans the confirmation towards the suspected side.
    history = values[: found.index]
    logs = [math.log(v) for v in history]
    n = len(logs)
    sd = max(statistics.stdev(logs), _SD_FLOOR)
    # H1 is the level the suspicion saw, never a change smaller than min_change: a suspicion of 1% on a very quiet
    # series would otherwise be confirmed by values that differ from the old level by a fraction of a percent.
    size = max(abs(math.log1p(found.change)), math.log1p(min_change))
    return SuspectedChange(
        index=found.index,
        direction=found.direction,
        baseline_mean=found.baseline_mean,
        suspected_mean=found.new_value_or_mean,
        change=found.change,
        score=found.score,
        log_mean=statistics.fmean(logs),
        log_sd=sd,
        shift=math.copysign(size, found.change),
        min_shift=math.copysign(max(size / 2, math.log1p(min_change)), found.change),
        history_count=n,
        df=n - 1,
        message=found.message,
    )


def suspect_since(
    values: Sequence[float],
    *,
    start: int,
    dismissed: tuple[int, int] | None = None,
    z_threshold: float = SUSPECT_Z,
    metric: Metric = THROUGHPUT,
) -> tuple[int, SuspectedChange] | None:
    """`suspect` on the series' current level, values[start:], and where the suspected level starts in `values`.

    `dismissed` is [first, end) of the values that raised the last dismissed suspicion. They are left out of the
    test: a new suspicion's newest values start after them, or one outlier would be suspected again on each of
    the next checks while it stays among the newest values; and they are not history either, since they were
    either noise (which would widen the spread) or a new level that the confirmation missed (which would pull
    the old level towards the new one and hide the step from the next check).
    """
    kept = list(range(start, len(values)))
    newest = len(kept)
    if dismissed is not None and dismissed[1] > start:
        kept = [i for i in kept if not dismissed[0] <= i < dismissed[1]]
        newest = sum(i >= dismissed[1] for i in kept)
    recent = min(RECENT, newest)
    if recent < 1:
        return None
    found = suspect([values[i] for i in kept], z_threshold=z_threshold, recent=recent, metric=metric)
    return None if found is None else (kept[found.index], found)


def verdict(
    llr: float, *, seen: int = 0, false_confirm: float = FALSE_CONFIRM, miss: float = MISS, patience: int = PATIENCE
) -> str:
    """What the log likelihood ratio of the `seen` values after a suspicion says: Wald's two thresholds, and
    "dismissed" once `patience` values left it undecided."""
    if not (0 < false_confirm < 0.5 and 0 < miss < 0.5):
        raise ValueError(f"need 0 < false_confirm, miss < 0.5, got {false_confirm}, {miss}")
    if llr >= math.log((1 - miss) / false_confirm):
        return CONFIRMED
    if llr <= math.log(miss / (1 - false_confirm)):
        return DISMISSED
    return DISMISSED if seen >= patience else UNDECIDED


@dataclass
class Watch:
    """One series' life, as the web layer keeps it in the database: feed each value as it arrives.

    `feed` returns what happened: "suspected" (a confirming run should be queued), "confirmed" or "dismissed"
    (a suspicion was decided by this value), or "" (nothing). `needs_confirmation` says whether to queue another
    confirming run now. Used by the bench and the tests; `actions.review` stores the same state in rows.
    """

    suspect_z: float = SUSPECT_Z
    false_confirm: float = FALSE_CONFIRM
    miss: float = MISS
    max_confirmations: int = MAX_CONFIRMATIONS
    values: list[float] | None = None
    start: int = 0  # first value of the current level
    pending: SuspectedChange | None = None
    llr: float = 0.0
    after: list[float] | None = None
    confirmations: int = 0
    raised_at: int = 0  # values seen when the pending suspicion was raised
    pending_index: int = 0  # where the pending suspicion's level starts
    dismissed: tuple[int, int] | None = None  # [first, end) of the values of the last dismissed suspicion
    flags: list[tuple[int, SuspectedChange]] | None = None  # (absolute index of the change, the suspicion)

    def __post_init__(self) -> None:
        self.values = [] if self.values is None else self.values
        self.flags = [] if self.flags is None else self.flags
        self.after = [] if self.after is None else self.after

    @property
    def needs_confirmation(self) -> bool:
        return self.pending is not None and self.confirmations < self.max_confirmations

    def feed(self, value: float, *, confirming: bool = False) -> str:
        assert self.values is not None and self.flags is not None and self.after is not None
        self.values.append(value)
        if confirming:
            self.confirmations += 1
        outcome = ""
        if self.pending is not None:
            self.after.append(value)
            self.llr = self.pending.log_likelihood_ratio(self.after)
            decided = verdict(self.llr, seen=len(self.after), false_confirm=self.false_confirm, miss=self.miss)
            if decided == CONFIRMED:
                index = self.pending_index
                self.flags.append((index, self.pending))
                self.start, self.pending = index, None
                return CONFIRMED
            if decided == UNDECIDED:
                return ""
            self.pending, outcome, self.dismissed = None, DISMISSED, (self.pending_index, self.raised_at)
        if confirming:
            return outcome  # a confirming run decides suspicions; it never starts one
        # An ordinary result that dismissed a suspicion may start the next one: a real step that a confirmation
        # missed is suspected again at once.
        found = suspect_since(self.values, start=self.start, dismissed=self.dismissed, z_threshold=self.suspect_z)
        if found is None:
            return outcome
        self.pending_index, self.pending = found
        self.llr, self.after, self.confirmations, self.raised_at = 0.0, [], 0, len(self.values)
        return SUSPECTED
