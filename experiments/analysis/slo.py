"""Latency objectives (SLOs) of a serving config: whether a cell's statistic meets one, the highest concurrency that
does, and goodput, the requests and output tokens per second of the requests that meet every objective on their own
values (as vLLM's `--goodput` counts them). Pure."""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

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
    verdicts: dict[int, bool] = {}
    for concurrency, stats in cells:
        verdicts[concurrency] = verdicts.get(concurrency, True) and slo_met(stats, slo) is True
    return max((level for level, met in verdicts.items() if met), default=None)


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
        return slo.metric in _UNDEFINED_FOR_ONE_TOKEN and request.get("output_tokens") == 1
    return math.isfinite(value) and value <= slo.limit_ms


def goodput(requests: Sequence[Mapping[str, float | None]], slos: Sequence[Slo], duration_s: float) -> Goodput:
    """Throughput of the requests that met every SLO on their own value, as vLLM's --goodput counts it: a request's
    `{metric}_ms` (ttft_ms, tpot_ms, itl_ms: its mean gap, e2e_latency_ms) at most the limit. An SLO's percentile
    has no meaning for one request and is ignored. A missing value fails (a failed request has none), except TPOT
    and ITL of a one-token answer, which has neither. Both rates divide by `duration_s`, the cell's wall time (the
    denominator of its throughput), and the tok/s counts the met requests' `output_tokens`. ValueError without an
    SLO or for a duration that is not positive and finite."""
    if not slos:
        raise ValueError("goodput needs at least one SLO")
    require_positive("duration_s", duration_s)
    met = [request for request in requests if all(_request_meets(request, slo) for slo in slos)]
    tokens = sum(request.get("output_tokens") or 0 for request in met)
    attainment = len(met) / len(requests) if requests else None
    return Goodput(len(met) / duration_s, tokens / duration_s, attainment, len(met), len(requests))
