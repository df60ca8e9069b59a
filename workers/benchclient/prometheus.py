"""The server's Prometheus metrics (SGLang with --enable-metrics).

Its counters around a cell: the accept length pooled over exactly the cell's requests, Δgeneration_tokens_total /
Δspec_verify_calls_total, and the server's own mean end-to-end latency, Δsum / Δcount of
sglang:e2e_request_latency_seconds. All count finished requests only (SGLang's observe_one_finished_request), so a
scrape after the warm-up and one after the cell's last response bound the cell.

Its gauges during a cell (`GaugeSampler`): running and queued requests, token usage, throughput, accept length and
rate, speculative steps, scraped every few hundred ms as a time series. Standard library and aiohttp only (this runs
on the GPU host)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import time
from typing import Any

import aiohttp

GENERATION_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
E2E_LATENCY_SUM = "sglang:e2e_request_latency_seconds_sum"
E2E_LATENCY_COUNT = "sglang:e2e_request_latency_seconds_count"
SCRAPED = (GENERATION_TOKENS, VERIFY_CALLS, E2E_LATENCY_SUM, E2E_LATENCY_COUNT)
SCRAPE_TIMEOUT_S = 5.0


# The gauges sampled during a cell, by the name the result gives them (their Prometheus name after "sglang:"), and
# how the label sets of one gauge combine when there are several (one per data-parallel scheduler): counts add up,
# ratios and rates average. SGLang sets them on its log ticks (a prefill batch, every --decode-log-interval decode
# steps), so a scrape reads the last tick's values.
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
_GAUGE_NAMES = tuple(f"sglang:{field}" for field in GAUGE_FIELDS)
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


def _values(text: str, names: tuple[str, ...]) -> dict[str, list[float]]:
    """Each named metric's finite values, one per label set, from the text format."""
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if "{" in line:  # name{labels} value [timestamp]; label values may hold spaces
            if "}" not in line:
                continue  # a line cut short
            name, after_labels = line[: line.index("{")], line[line.rindex("}") + 1 :]
        else:
            name, _, after_labels = line.partition(" ")
        if name not in names:
            continue
        try:
            value = float(after_labels.split()[0])
        except (IndexError, ValueError):
            continue
        if math.isfinite(value):
            found.setdefault(name, []).append(value)
    return found


def counter_totals(text: str, names: tuple[str, ...] = SCRAPED) -> dict[str, float]:
    """Each named counter summed over its label sets (`is_streaming`, one per scheduler), from the text format."""
    return {name: sum(values) for name, values in _values(text, names).items()}


def gauge_values(text: str) -> list[float | None]:
    """The GAUGES in their order, their label sets combined; None for one the server does not serve (a baseline
    serves no spec_* gauge, an older SGLang no spec_num_steps)."""
    found = _values(text, _GAUGE_NAMES)
    out: list[float | None] = []
    for name, (_, combine) in zip(_GAUGE_NAMES, GAUGES, strict=True):
        values = found.get(name)
        out.append(None if not values else sum(values) if combine == "sum" else sum(values) / len(values))
    return out


async def scrape(session: aiohttp.ClientSession, base_url: str) -> dict[str, float] | None:
    """The counters now, or None when the server serves no metrics (no --enable-metrics: 404) or cannot answer."""
    text = await _metrics_text(session, base_url, SCRAPE_TIMEOUT_S)
    return counter_totals(text) if text is not None else None


class GaugeSampler:
    """Scrapes the server's gauges every `interval_ms` while a cell runs, on its own session and task, so a slow
    or failing scrape never holds up a request; `async with` bounds it to the cell. A server without metrics (the
    first scrape answers 404, or nothing) is not asked again."""

    def __init__(self, base_url: str, interval_ms: int = DEFAULT_INTERVAL_MS, *, stream: bool = False) -> None:
        if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
            raise ValueError(f"the scrape interval must be {MIN_INTERVAL_MS}-{MAX_INTERVAL_MS} ms, got {interval_ms}")
        self.base_url = base_url
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
                    self.samples.append((asked, gauge_values(text)))
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


def server_mean_e2e_latency_ms(before: dict[str, float] | None, after: dict[str, float] | None) -> float | None:
    """The server's own mean end-to-end latency over the requests that finished between the two scrapes, from its
    sglang:e2e_request_latency_seconds histogram; None without it. Set beside the client's mean, the gap is what the
    network and the client added."""
    if not before or not after or E2E_LATENCY_COUNT not in after or E2E_LATENCY_SUM not in after:
        return None
    count = after[E2E_LATENCY_COUNT] - before.get(E2E_LATENCY_COUNT, 0.0)
    total = after[E2E_LATENCY_SUM] - before.get(E2E_LATENCY_SUM, 0.0)
    return 1000 * total / count if count > 0 and total >= 0 else None
