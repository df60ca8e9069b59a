"""Pure statistics for specdash; imports nothing from Django.

- `verdicts`: the one `Comparison` every page, the API, the exports and the CLI read (`judge` makes it).
- `comparison`: speedup of candidates over the baseline with a 95% interval, verdicts, runs needed, break-even
  concurrency; `compare_configs` is the one pipeline every page uses (usable samples, then the equivalence gate).
- `history`: regressions over a series of results (lookback test, change points).
- `confirmation`: suspect a change, then confirm it with new values (a sequential test) before it is a flag.
- `breakeven`: the accept length a speculative config needs to match the baseline.
- `intervals`: the mean of a cell with its 95% interval, and `Point`, the value the pages plot.
- `run_order`: the interleaved order of an experiment's launches (not a cadence, not an adaptive schedule).
- `tdist`: Student's t quantile and tail, stdlib only.
"""

from .breakeven import BreakEven, break_even_accept_length
from .cards import VerdictCard, settled_break_even, settled_break_evens, verdict_cards
from .comparison import (
    CONFIDENCE,
    FASTER,
    INCONCLUSIVE,
    MAX_RUNS_NEEDED,
    POWER,
    SLOWER,
    ComparisonRow,
    Sample,
    best_row,
    break_even_concurrency,
    compare,
    compare_configs,
    is_usable,
    launches_to_settle,
    never_pays,
    sample_variance,
    settling_note,
)
from .confirmation import (
    CONFIRMED,
    DISMISSED,
    MAX_CONFIRMATIONS,
    RECENT,
    SUSPECTED,
    UNDECIDED,
    SuspectedChange,
    Watch,
    suspect,
    suspect_since,
    verdict,
)
from .equivalence import OUTPUTS_DIFFER, Equivalence, check_outputs
from .history import (
    ACCEPTANCE,
    CHANGE_POINT,
    IMPROVEMENT,
    LOOKBACK,
    METRICS,
    REGRESSION,
    THROUGHPUT,
    HistoryPoint,
    Metric,
    RegressionFlag,
    assess_series,
    change_points,
    check_latest,
)
from .intervals import Point, mean_interval, ratio_text
from .tdist import t_quantile
from .verdicts import COLLAPSED, MATCHES, Comparison, GateOutcome, judge

__all__ = [
    "ACCEPTANCE",
    "CHANGE_POINT",
    "COLLAPSED",
    "CONFIDENCE",
    "CONFIRMED",
    "DISMISSED",
    "FASTER",
    "IMPROVEMENT",
    "INCONCLUSIVE",
    "LOOKBACK",
    "MATCHES",
    "MAX_CONFIRMATIONS",
    "MAX_RUNS_NEEDED",
    "METRICS",
    "OUTPUTS_DIFFER",
    "POWER",
    "RECENT",
    "REGRESSION",
    "SLOWER",
    "SUSPECTED",
    "THROUGHPUT",
    "UNDECIDED",
    "BreakEven",
    "Comparison",
    "ComparisonRow",
    "Equivalence",
    "GateOutcome",
    "HistoryPoint",
    "Metric",
    "Point",
    "RegressionFlag",
    "Sample",
    "SuspectedChange",
    "VerdictCard",
    "Watch",
    "assess_series",
    "best_row",
    "break_even_accept_length",
    "break_even_concurrency",
    "change_points",
    "check_latest",
    "check_outputs",
    "compare",
    "compare_configs",
    "is_usable",
    "judge",
    "launches_to_settle",
    "mean_interval",
    "never_pays",
    "ratio_text",
    "sample_variance",
    "settled_break_even",
    "settled_break_evens",
    "settling_note",
    "suspect",
    "suspect_since",
    "t_quantile",
    "verdict",
    "verdict_cards",
]
