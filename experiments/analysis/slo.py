"""Latency objectives (SLOs) of a serving config: whether a cell's statistic meets one, the highest concurrency that
does, and goodput, the requests and output tokens per second of the requests that meet every objective on their own
values (as vLLM's `--goodput` counts them). Pure."""

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .comparison import FASTER
from .deployment import require_positive

METRICS = ("ttft", "tpot", "itl", "e2e_latency")
PERCENTILES = ("mean", "median", "p90", "p99")
# A one-token answer has no time per output token and no inter-token gap: it cannot break those SLOs.
_UNDEFINED_FOR_ONE_TOKEN = ("tpot", "itl")


@dataclass(frozen=True)
class Slo:
    """A latency objective: `percentile` (mean, median, p90, p99) of `metric` at most `limit_ms`; exactly at the
    limit counts as met. Metrics: ttft (time to first token), tpot (time per output token after the first), itl
    (gap between streamed tokens), e2e_latency (the whole request)."""

    metric: str
    percentile: str
    limit_ms: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"SLO metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if self.percentile not in PERCENTILES:
            raise ValueError(f"SLO percentile must be one of {', '.join(PERCENTILES)}, got {self.percentile!r}")
        if isinstance(self.limit_ms, bool) or not isinstance(self.limit_ms, int | float):
            raise ValueError(f"SLO limit_ms must be a number, got {self.limit_ms!r}")
        require_positive("SLO limit_ms", self.limit_ms)

    @property
    def key(self) -> str:
        """The cell statistic it reads: "p90_tpot_ms", "mean_e2e_latency_ms", ..."""
        return f"{self.percentile}_{self.metric}_ms"


def slo_met(cell_stats: Mapping[str, float | None], slo: Slo) -> bool | None:
    """Whether a cell's statistic `slo.key` is at most the limit; None when the statistic is missing or not
    finite (unknown is not met, and not failed either)."""
    value = cell_stats.get(slo.key)
    if value is None or not math.isfinite(value):
        return None
    return value <= slo.limit_ms


def highest_concurrency_meeting(cells: Iterable[tuple[int, Mapping[str, float | None]]], slo: Slo) -> int | None:
    """The highest concurrency among `cells` ((concurrency, statistics) pairs, one per pass or launch) at which every
    cell meets `slo`; a cell whose statistic is missing does not. None when no concurrency does. A lower concurrency
    that fails does not disqualify a higher one that meets it: each level is judged on its own cells."""
    return max(concurrencies_meeting(cells, slo), default=None)


def concurrencies_meeting(cells: Iterable[tuple[int, Mapping[str, float | None]]], slo: Slo) -> list[int]:
    """The concurrencies (ascending) at which every one of `cells` meets `slo`, as `highest_concurrency_meeting`
    judges each level."""
    verdicts: dict[int, bool] = {}
    for concurrency, stats in cells:
        verdicts[concurrency] = verdicts.get(concurrency, True) and slo_met(stats, slo) is True
    return sorted(level for level, met in verdicts.items() if met)


@dataclass(frozen=True)
class Goodput:
    """The requests that met every SLO, per second of the cell and in their output tok/s; `attainment` is the
    fraction of all requests that met them (None with no requests)."""

    requests_per_s: float
    output_tok_s: float
    attainment: float | None
    met: int
    total: int


def _request_meets(request: Mapping[str, float | None], slo: Slo) -> bool:
    value = request.get(f"{slo.metric}_ms")
    if value is None:
        return slo.metric in _UNDEFINED_FOR_ONE_TOKEN and request.get("output_len") == 1
    return math.isfinite(value) and value <= slo.limit_ms


def goodput(requests: Sequence[Mapping[str, float | None]], slos: Sequence[Slo], duration_s: float) -> Goodput:
    """Throughput of the requests that met every SLO on their own value, as vLLM's --goodput counts it: a request's
    `{metric}_ms` (ttft_ms, tpot_ms, itl_ms: its mean gap, e2e_latency_ms) at most the limit. An SLO's percentile
    has no meaning for one request and is ignored. A missing value fails (a failed request has none), except TPOT
    and ITL of a one-token answer, which has neither. Both rates divide by `duration_s`, the cell's wall time (the
    denominator of its throughput), and the tok/s counts the met requests' `output_len` (output tokens).
    ValueError without an SLO or for a duration that is not positive and finite."""
    if not slos:
        raise ValueError("goodput needs at least one SLO")
    require_positive("duration_s", duration_s)
    met = [request for request in requests if all(_request_meets(request, slo) for slo in slos)]
    tokens = sum(request.get("output_len") or 0 for request in met)
    attainment = len(met) / len(requests) if requests else None
    return Goodput(len(met) / duration_s, tokens / duration_s, attainment, len(met), len(requests))


# The per-request fields goodput reads, as the benchmark client's request rows carry them.
REQUEST_FIELDS = ("ok", "output_len", *(f"{metric}_ms" for metric in METRICS))
MAX_REQUESTS = 100_000
MAX_OUTPUT_LEN = 10**9
MAX_LATENCY_MS = 7 * 24 * 3600 * 1000.0


def checked_requests(rows: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """A cell's request rows as the host reported them, reduced to REQUEST_FIELDS and checked: `ok` a bool,
    `output_len` a whole count, each latency a finite number from 0 to a week or None. A row that fails is dropped
    and counted in the one problem returned (never guessed at); a cell reporting no list has no rows."""
    if rows is None:
        return [], []
    if not isinstance(rows, list) or len(rows) > MAX_REQUESTS:
        return [], [f"The cell's request rows were not stored: not a list of at most {MAX_REQUESTS} rows."]
    kept, refused = [], 0
    for row in rows:
        checked = _checked_row(row)
        if checked is None:
            refused += 1
        else:
            kept.append(checked)
    problems = [f"{refused} of the cell's {len(rows)} request rows were refused (not numbers a request can have)."]
    return kept, problems if refused else []


def _checked_row(row: Any) -> dict[str, Any] | None:
    if not isinstance(row, dict) or type(row.get("ok")) is not bool:
        return None
    output_len = row.get("output_len")
    if type(output_len) is not int or not 0 <= output_len <= MAX_OUTPUT_LEN:
        return None
    checked: dict[str, Any] = {"ok": row["ok"], "output_len": output_len}
    for metric in METRICS:
        value = row.get(f"{metric}_ms")
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_LATENCY_MS
        ):
            return None
        checked[f"{metric}_ms"] = None if value is None else float(value)
    return checked


def candidate_headline(
    name: str,
    objective: Slo,
    verdicts: Mapping[int, str],
    meeting: Collection[int],
    baseline: str,
    baseline_reach: int | None,
) -> str:
    """One sentence on a candidate under an SLO: up to which concurrency it is faster than the baseline while it
    meets the SLO (every compared level from the lowest up faster by the comparison's verdict and meeting the SLO),
    and up to which each of the two meets it. `verdicts`: the comparison's verdict by concurrency; `meeting`: the
    candidate's `concurrencies_meeting`; `baseline_reach`: the baseline's `highest_concurrency_meeting`."""
    faster_up_to = None
    for level in sorted(verdicts):
        if level not in meeting or verdicts[level] != FASTER:
            break
        faster_up_to = level
    reach = max(meeting, default=None)
    if faster_up_to is not None:
        speed = f"is faster up to c={faster_up_to}"
    elif not verdicts:
        speed = "has no comparison yet"
    elif min(verdicts) not in meeting:
        speed = f"misses it at c={min(verdicts)}"
    else:
        speed = f"is not faster at c={min(verdicts)} ({verdicts[min(verdicts)]})"

    def meets(level: int | None) -> str:
        return f"up to c={level}" if level is not None else "at no measured concurrency"

    return (
        f"Under the SLO ({describe(objective)}), {name} {speed} and meets the SLO {meets(reach)}; "
        f"{baseline} meets it {meets(baseline_reach)}."
    )


def describe(objective: Slo) -> str:
    """ "p90 TPOT ≤ 50 ms"."""
    return f"{objective.percentile} {objective.metric.replace('_', ' ').upper()} ≤ {objective.limit_ms:g} ms"
