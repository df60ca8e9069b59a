"""The server's Prometheus counters around a cell (SGLang with --enable-metrics): the accept length pooled over
exactly the cell's requests, Δgeneration_tokens_total / Δspec_verify_calls_total, and the server's own mean
end-to-end latency, Δsum / Δcount of sglang:e2e_request_latency_seconds. All count finished requests only (SGLang's
observe_one_finished_request), so a scrape after the warm-up and one after the cell's last response bound the cell.
Standard library and aiohttp only (this runs on the GPU host)."""

from __future__ import annotations

import math

import aiohttp

GENERATION_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
E2E_LATENCY_SUM = "sglang:e2e_request_latency_seconds_sum"
E2E_LATENCY_COUNT = "sglang:e2e_request_latency_seconds_count"
SCRAPED = (GENERATION_TOKENS, VERIFY_CALLS, E2E_LATENCY_SUM, E2E_LATENCY_COUNT)
SCRAPE_TIMEOUT_S = 5.0


def counter_totals(text: str, names: tuple[str, ...] = SCRAPED) -> dict[str, float]:
    """Each named counter summed over its label sets (`is_streaming`, one per scheduler), from the text format."""
    totals: dict[str, float] = {}
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
            totals[name] = totals.get(name, 0.0) + value
    return totals


async def scrape(session: aiohttp.ClientSession, base_url: str) -> dict[str, float] | None:
    """The counters now, or None when the server serves no metrics (no --enable-metrics: 404) or cannot answer."""
    try:
        timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
        async with session.get(f"{base_url}/metrics", timeout=timeout) as response:
            if response.status != 200:
                return None
            return counter_totals(await response.text())
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
