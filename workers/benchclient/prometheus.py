"""The server's Prometheus metrics: SGLang with --enable-metrics, vLLM always (unless --disable-log-stats).

Its counters around a cell: the accept length pooled over exactly the cell's requests, and the server's own mean
end-to-end latency, Δsum / Δcount of its e2e_request_latency_seconds histogram. SGLang's pooled figure is
Δgeneration_tokens_total / Δspec_verify_calls_total; vLLM's is `vllm bench serve`'s (reference vllm-interface §7.4):
1 + Δaccepted / Δdrafts over its spec_decode counters, with per-position acceptance Δaccepted_per_pos / Δdrafts.
SGLang counts finished requests only (observe_one_finished_request), vLLM each engine step as it is done, and every
step of a cell is done once its last response came: a scrape after the warm-up and one after the cell's last response
bound the cell.

Its gauges during a cell (`GaugeSampler`): running and queued requests, token usage, throughput, accept length and
rate, speculative steps, scraped every few hundred ms as a time series; each engine's names for them are in its
`EngineMetrics` table (`ENGINE_METRICS`). Standard library and aiohttp only (this runs on the GPU host)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

GENERATION_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
E2E_LATENCY_SUM = "sglang:e2e_request_latency_seconds_sum"
E2E_LATENCY_COUNT = "sglang:e2e_request_latency_seconds_count"
SCRAPED = (GENERATION_TOKENS, VERIFY_CALLS, E2E_LATENCY_SUM, E2E_LATENCY_COUNT)
# vLLM's spec-decode counters (§3.2): the `_total` samples; the `_created` gauges beside them are timestamps.
VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_E2E_LATENCY_SUM = "vllm:e2e_request_latency_seconds_sum"
VLLM_E2E_LATENCY_COUNT = "vllm:e2e_request_latency_seconds_count"
SCRAPE_TIMEOUT_S = 5.0


# The gauges sampled during a cell, by the name the result gives them (SGLang's Prometheus name after "sglang:"), and
# how the label sets of one gauge combine when there are several (one per data-parallel scheduler or vLLM engine):
# counts add up, ratios and rates average. SGLang sets them on its log ticks (a prefill batch, every
# --decode-log-interval decode steps), so a scrape reads the last tick's values.
GAUGES = (
    ("num_running_reqs", "sum"),
    ("num_queue_reqs", "sum"),
    ("num_used_tokens", "sum"),
    ("token_usage", "mean"),
    ("gen_throughput", "sum"),
    ("spec_accept_length", "mean"),
    ("spec_accept_rate", "mean"),
    ("spec_num_steps", "mean"),
    ("spec_num_draft_tokens", "mean"),
)
GAUGE_FIELDS = tuple(field for field, _ in GAUGES)
DEFAULT_INTERVAL_MS = 250
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 50, 10_000
# A cell's samples at most: past it, every other one goes and the interval doubles, so a long cell keeps its whole
# span at a coarser step and the result line stays bounded (~200 KB).
MAX_SAMPLES = 2000
# While a cell runs, the samples taken since the last such line go out on stderr at most once a second, so the run
# page's chart moves with the cell; what went out is not in the result again. A line stays under the worker's
# 4096-character cut: past it, fewer samples go and the rest wait for the next line (or the result).
STREAM_EVERY_S = 1.0
STREAM_PREFIX = "benchclient: metrics "
MAX_STREAM_LINE = 4000
MAX_STREAM_SAMPLES = 40


@dataclass(frozen=True)
class EngineMetrics:
    """One engine's Prometheus names for what the client reads."""

    # Counters scraped around a cell, each summed over its label sets.
    counters: tuple[str, ...]
    # A counter summed per value of its `position` label (vLLM's accepted tokens per draft position), or None.
    per_position: str | None
    # Per GAUGE_FIELDS, in order: the names that serve it, the first one the server serves wins; () for a gauge the
    # engine has no equivalent of (its samples are None).
    gauges: tuple[tuple[str, ...], ...]
    e2e_latency_sum: str
    e2e_latency_count: str


SGLANG = EngineMetrics(
    counters=SCRAPED,
    per_position=None,
    gauges=tuple((f"sglang:{field}",) for field in GAUGE_FIELDS),
    e2e_latency_sum=E2E_LATENCY_SUM,
    e2e_latency_count=E2E_LATENCY_COUNT,
)
# vLLM V1 serves no throughput, accept-length or step gauges (§3.2): only running and waiting requests and the KV
# cache usage, a fraction of 1 like SGLang's token_usage (`gpu_cache_usage_perc` before 0.11, still served hidden).
_VLLM_GAUGES = {
    "num_running_reqs": ("vllm:num_requests_running",),
    "num_queue_reqs": ("vllm:num_requests_waiting",),
    "token_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
VLLM = EngineMetrics(
    counters=(
        VLLM_DRAFTS,
        VLLM_DRAFT_TOKENS,
        VLLM_ACCEPTED,
        VLLM_GENERATION_TOKENS,
        VLLM_E2E_LATENCY_SUM,
        VLLM_E2E_LATENCY_COUNT,
    ),
    per_position=VLLM_ACCEPTED_PER_POS,
    gauges=tuple(_VLLM_GAUGES.get(field, ()) for field in GAUGE_FIELDS),
    e2e_latency_sum=VLLM_E2E_LATENCY_SUM,
    e2e_latency_count=VLLM_E2E_LATENCY_COUNT,
)
# By the client's backend name.
ENGINE_METRICS = {"sglang": SGLANG, "sglang-oai": SGLANG, "vllm": VLLM}
_POSITION_LABEL = re.compile(r'(?:^|,)\s*position="(\d+)"')


def _samples(text: str, names: frozenset[str] | tuple[str, ...]) -> list[tuple[str, str, float]]:
    """(name, labels, value) of each named metric's finite samples, from the text format; labels is the text between
    the braces ("" without)."""
    found: list[tuple[str, str, float]] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if "{" in line:  # name{labels} value [timestamp]; label values may hold spaces
            if "}" not in line:
                continue  # a line cut short
            name, after_labels = line[: line.index("{")], line[line.rindex("}") + 1 :]
            labels = line[line.index("{") + 1 : line.rindex("}")]
        else:
            name, _, after_labels = line.partition(" ")
            labels = ""
        if name not in names:
            continue
        try:
            value = float(after_labels.split()[0])
        except (IndexError, ValueError):
            continue
        if math.isfinite(value):
            found.append((name, labels, value))
    return found


def _values(text: str, names: frozenset[str] | tuple[str, ...]) -> dict[str, list[float]]:
    """Each named metric's finite values, one per label set, from the text format."""
    found: dict[str, list[float]] = {}
    for name, _, value in _samples(text, names):
        found.setdefault(name, []).append(value)
    return found


def position_key(name: str, position: int) -> str:
    """The key of a per-position counter's total for one position among the counters `scrape` returns."""
    return f'{name}{{position="{position}"}}'


def counter_totals(text: str, names: tuple[str, ...] = SCRAPED, per_position: str | None = None) -> dict[str, float]:
    """Each named counter summed over its label sets (`is_streaming`, one per scheduler or engine), from the text
    format; with `per_position`, that counter summed per `position` label value too, under `position_key`."""
    totals = {name: sum(values) for name, values in _values(text, names).items()}
    if per_position is not None:
        for _, labels, value in _samples(text, (per_position,)):
            match = _POSITION_LABEL.search(labels)
            if match is not None:
                key = position_key(per_position, int(match.group(1)))
                totals[key] = totals.get(key, 0.0) + value
    return totals


def gauge_values(text: str, engine: EngineMetrics = SGLANG) -> list[float | None]:
    """The GAUGES in their order, their label sets combined; None for one the server does not serve (a baseline
    serves no spec_* gauge, an older SGLang no spec_num_steps, vLLM none but running, waiting and cache usage)."""
    found = _values(text, frozenset(name for names in engine.gauges for name in names))
    out: list[float | None] = []
    for names, (_, combine) in zip(engine.gauges, GAUGES, strict=True):
        values = next((found[name] for name in names if found.get(name)), None)
        out.append(None if not values else sum(values) if combine == "sum" else sum(values) / len(values))
    return out


async def scrape(
    session: aiohttp.ClientSession, base_url: str, engine: EngineMetrics = SGLANG
) -> dict[str, float] | None:
    """The counters now, or None when the server serves no metrics (SGLang without --enable-metrics: 404) or cannot
    answer."""
    text = await _metrics_text(session, base_url, SCRAPE_TIMEOUT_S)
    return counter_totals(text, engine.counters, engine.per_position) if text is not None else None


class GaugeSampler:
    """Scrapes the server's gauges every `interval_ms` while a cell runs, on its own session and task, so a slow
    or failing scrape never holds up a request; `async with` bounds it to the cell. A server without metrics (the
    first scrape answers 404, or nothing) is not asked again."""

    def __init__(
        self,
        base_url: str,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        *,
        stream: bool = False,
        engine: EngineMetrics = SGLANG,
    ) -> None:
        if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
            raise ValueError(f"the scrape interval must be {MIN_INTERVAL_MS}-{MAX_INTERVAL_MS} ms, got {interval_ms}")
        self.base_url = base_url
        self.engine = engine
        self.interval_s = interval_ms / 1000
        # (time.perf_counter(), GAUGES' values), not yet streamed
        self.samples: list[tuple[float, list[float | None]]] = []
        self.served = True
        self.stream = stream
        self._streamed_at = time.perf_counter()
        self._has_streamed = False
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GaugeSampler:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _sample(self) -> None:
        timeout_s = min(SCRAPE_TIMEOUT_S, max(1.0, 4 * self.interval_s))
        async with aiohttp.ClientSession() as session:
            while True:
                # Stamped when asked: a scrape that answers slowly does not move its sample later
                # (nor bring the next one closer than the interval).
                asked = time.perf_counter()
                text = await _metrics_text(session, self.base_url, timeout_s)
                if text is None and not self.samples and not self._has_streamed:
                    self.served = False
                    return
                if text is not None:
                    self.samples.append((asked, gauge_values(text, self.engine)))
                    if len(self.samples) > MAX_SAMPLES:
                        del self.samples[1::2]
                        self.interval_s *= 2
                if self.stream and asked - self._streamed_at >= STREAM_EVERY_S:
                    self._streamed_at = asked
                    line = self.stream_line(time.perf_counter())
                    if line is not None:
                        print(line, file=sys.stderr, flush=True)
                # The next one an interval after this one was asked: never closer (a scrape that woke late is not
                # caught up in a burst), at once after a scrape that took longer than the interval.
                await asyncio.sleep(max(0.0, asked + self.interval_s - time.perf_counter()))

    def stream_line(self, now: float) -> str | None:
        """The oldest samples not yet streamed as one stderr line, `STREAM_PREFIX` then the report's JSON shape (ages
        at `now`, the worker dates them by the line's arrival); they leave `samples`. None when there are none."""
        count = min(len(self.samples), MAX_STREAM_SAMPLES)
        while count > 0:
            report = self._report(self.samples[:count], now)
            line = STREAM_PREFIX + json.dumps(report, separators=(",", ":"), allow_nan=False)
            if len(line) <= MAX_STREAM_LINE:
                del self.samples[:count]
                self._has_streamed = True
                return line
            count //= 2
        return None

    def _report(self, samples: list[tuple[float, list[float | None]]], now: float) -> dict[str, Any]:
        return {
            "interval_ms": round(self.interval_s * 1000),
            "fields": ["ago_s", *GAUGE_FIELDS],
            "samples": [[round(now - t, 3), *values] for t, values in samples],
        }

    def report(self, now: float) -> dict[str, Any] | None:
        """The samples for the result, those not streamed: each one's age in seconds at `now` (a time.perf_counter()
        taken as the result is written, so the worker can put them on its own clock) then the GAUGES' values; None
        without metrics."""
        if not self.served:
            return None
        return self._report(self.samples, now)


async def _metrics_text(session: aiohttp.ClientSession, base_url: str, timeout_s: float) -> str | None:
    """GET /metrics: its text, or None for any answer but 200 or none at all."""
    try:
        async with session.get(f"{base_url}/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            return await response.text() if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


def pooled_accept_length(before: dict[str, float] | None, after: dict[str, float] | None) -> float | None:
    """Output tokens per verify step over what finished between the two scrapes; None without both counters."""
    if not before or not after or VERIFY_CALLS not in after or GENERATION_TOKENS not in after:
        return None
    steps = after[VERIFY_CALLS] - before.get(VERIFY_CALLS, 0.0)
    tokens = after[GENERATION_TOKENS] - before.get(GENERATION_TOKENS, 0.0)
    return tokens / steps if steps > 0 else None


def server_mean_e2e_latency_ms(
    before: dict[str, float] | None, after: dict[str, float] | None, engine: EngineMetrics = SGLANG
) -> float | None:
    """The server's own mean end-to-end latency over the requests that finished between the two scrapes, from its
    e2e_request_latency_seconds histogram; None without it. Set beside the client's mean, the gap is what the
    network and the client added."""
    count_name, sum_name = engine.e2e_latency_count, engine.e2e_latency_sum
    if not before or not after or count_name not in after or sum_name not in after:
        return None
    count = after[count_name] - before.get(count_name, 0.0)
    total = after[sum_name] - before.get(sum_name, 0.0)
    return 1000 * total / count if count > 0 and total >= 0 else None


# vLLM's spec-decode figures of a cell, as `spec_decode_figures` names them in the result: the raw counts beside the
# figures every engine fills (pooled_accept_length, accepted_drafts_histogram, position_acceptance).
VLLM_SPEC_KEYS = (
    "spec_decode_num_drafts",
    "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens",
    "spec_decode_accepted_per_position",
    "spec_decode_acceptance_rate",
)


def _positions(counters: dict[str, float], name: str) -> list[int]:
    """The positions of a per-position counter among `counters`, in order."""
    key = re.compile(re.escape(name) + r'\{position="([0-9]+)"\}')
    return sorted(int(match.group(1)) for match in map(key.fullmatch, counters) if match is not None)


def _delta(before: dict[str, float], after: dict[str, float], name: str) -> int:
    # Counters of whole events, exposed as floats ("5.0").
    return round(after[name] - before.get(name, 0.0))


def spec_decode_figures(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any]:
    """vLLM's acceptance over what the server did between the two scrapes, computed as `vllm bench serve` does
    (§7.4) from the deltas of its spec_decode counters, each summed over its engines:
    - spec_decode_num_drafts / _draft_tokens / _accepted_tokens: the deltas; spec_decode_accepted_per_position: the
      accepted tokens at draft position 0, 1, ... (a draft's token counts only if all before it were accepted);
    - spec_decode_acceptance_rate: accepted / draft tokens, in percent as vLLM prints it;
    - pooled_accept_length: Δvllm:generation_tokens / drafts, the output tokens per verify step: SGLang's pooled
      definition (Δgeneration_tokens / Δspec_verify_calls), so that an accept length means the same on both engines.
      It counts each request's first token, which its prefill made, as SGLang's does;
    - server_accept_length: 1 + accepted / drafts, vLLM's own "Mean acceptance length" (what its SpecDecoding line and
      `vllm bench serve` print): the same steps without the prefill tokens, lower by requests / drafts;
    - position_acceptance: accepted at position i / drafts, the share of drafts that accepted at least i + 1 tokens;
    - accepted_drafts_histogram: index j, the drafts that accepted exactly j tokens, which is what those per-position
      counts say (drafts - pos 0, pos 0 - pos 1, ..., pos K-1); position_acceptance follows from it as from
      SGLang's per-request histograms.
    Every key is present; None where the server serves no spec counters (a baseline, --disable-log-stats, a restart
    between the scrapes), the rates also when nothing was drafted."""
    out: dict[str, Any] = dict.fromkeys((*VLLM_SPEC_KEYS, "pooled_accept_length", "server_accept_length",
                                         "accepted_drafts_histogram", "position_acceptance"))  # fmt: skip
    counters = (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED)
    if not before or not after or not all(name in after for name in counters):
        return out
    drafts, draft_tokens, accepted = (_delta(before, after, name) for name in counters)
    positions = _positions(after, VLLM_ACCEPTED_PER_POS)
    per_position = [_delta(before, after, position_key(VLLM_ACCEPTED_PER_POS, i)) for i in positions]
    if min(drafts, draft_tokens, accepted, *per_position) < 0:
        return out  # a counter went back: the server restarted between the scrapes
    out |= {
        "spec_decode_num_drafts": drafts,
        "spec_decode_draft_tokens": draft_tokens,
        "spec_decode_accepted_tokens": accepted,
        "spec_decode_accepted_per_position": per_position if positions == list(range(len(positions))) else None,
    }
    if draft_tokens > 0:
        out["spec_decode_acceptance_rate"] = 100.0 * accepted / draft_tokens
    if drafts <= 0:
        return out
    out["server_accept_length"] = 1.0 + accepted / drafts
    if VLLM_GENERATION_TOKENS in after:
        generated = _delta(before, after, VLLM_GENERATION_TOKENS)
        out["pooled_accept_length"] = generated / drafts if generated > 0 else None
    if out["spec_decode_accepted_per_position"]:
        histogram = [drafts - per_position[0]]
        histogram += [earlier - later for earlier, later in itertools.pairwise(per_position)]
        histogram.append(per_position[-1])
        if min(histogram) >= 0:
            out["accepted_drafts_histogram"] = histogram
            out["position_acceptance"] = [count / drafts for count in per_position]
    return out
