"""Benchmark arithmetic, following bench_serving's calculate_metrics (reference §5.2).

Pure: no I/O and no aiohttp, so the numbers can be checked against hand-computed timings.
All times are seconds from one monotonic clock; reported latencies are converted to milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# How many distinct error messages a result keeps; the rest are only counted.
MAX_ERRORS_KEPT = 5


@dataclass(slots=True)
class RequestRecord:
    """What the client saw of one request. Only chunks that carried new tokens are recorded."""

    prompt_len: int
    start: float
    end: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    # New tokens per recorded chunk. The OpenAI backend cannot count them and records 1 per chunk.
    chunk_tokens: list[int] = field(default_factory=list)
    output_len: int = 0
    # Verify steps of a speculative server (meta_info.spec_verify_ct); None when the server did not say.
    spec_verify_ct: int | None = None
    # Index i: the request's verify steps that accepted exactly i drafts (meta_info.spec_correct_drafts_histogram);
    # None when the server did not say.
    spec_drafts_histogram: list[int] | None = None
    # What the request sent, from a prompt file: the prompt's index in its set and its category.
    prompt_index: int | None = None
    category: str | None = None
    # The generated token ids (final chunk's output_ids), kept only when the run compares outputs.
    keep_output: bool = False
    output_ids: list[int] | None = None
    # For the degenerate-benchmark checks (repetition.py): where the output falls into a repetition loop (None: it
    # does not), counted in the units it was checked in ("tokens" ids, or "words" of the text when the server sent
    # no ids); the prompt's digest and repetitiveness, measured as it was sent; the server's own count of its tokens.
    loop_at: int | None = None
    loop_period: int | None = None
    loop_unit: str | None = None
    prompt_digest: str | None = None
    prompt_repeat_share: float | None = None
    server_prompt_tokens: int | None = None
    error: str | None = None
    # True when the server could not be reached at all (connection refused, DNS failure).
    unreachable: bool = False

    @property
    def succeeded(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class RequestTimings:
    ttft: float
    latency: float
    itl: list[float]
    tpot: float | None


def request_timings(record: RequestRecord, *, split_itl: bool) -> RequestTimings:
    """ttft, e2e latency, inter-token latencies and tpot of one successful request.

    With split_itl (the sglang backend) a chunk that brought n tokens contributes n gaps of gap/n, so the
    multi-token chunks of speculative decoding do not look like one slow token.
    """
    ttft = record.chunk_times[0] - record.start
    latency = record.end - record.start
    itl: list[float] = []
    previous = record.chunk_times[0]
    for arrival, new_tokens in zip(record.chunk_times[1:], record.chunk_tokens[1:], strict=True):
        gap = arrival - previous
        previous = arrival
        if split_itl and new_tokens > 1:
            itl.extend([gap / new_tokens] * new_tokens)
        else:
            itl.append(gap)
    tpot = (latency - ttft) / (record.output_len - 1) if record.output_len > 1 else None
    return RequestTimings(ttft=ttft, latency=latency, itl=itl, tpot=tpot)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """numpy.percentile's default ("linear") method on already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    position = (len(sorted_values) - 1) * q / 100.0
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    fraction = position - lower
    return sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * fraction


def _distribution_ms(name: str, values_s: Sequence[float]) -> dict[str, float | None]:
    if not values_s:
        return {
            f"mean_{name}_ms": None,
            f"median_{name}_ms": None,
            f"p90_{name}_ms": None,
            f"p99_{name}_ms": None,
        }
    ordered = sorted(values_s)
    return {
        f"mean_{name}_ms": math.fsum(ordered) / len(ordered) * 1000.0,
        f"median_{name}_ms": percentile(ordered, 50) * 1000.0,
        f"p90_{name}_ms": percentile(ordered, 90) * 1000.0,
        f"p99_{name}_ms": percentile(ordered, 99) * 1000.0,
    }


def max_output_tokens_per_s(records: Sequence[RequestRecord]) -> float:
    """The most output tokens received within any one-second bucket, counted from the first request start.

    Tokens are attributed to the arrival time of the chunk that carried them. When the per-chunk counts
    do not add up to output_len (OpenAI streams, one count per chunk), they are scaled to it.
    """
    succeeded = [record for record in records if record.succeeded and record.chunk_times]
    if not succeeded:
        return 0.0
    origin = min(record.start for record in succeeded)
    buckets: dict[int, float] = {}
    for record in succeeded:
        counted = sum(record.chunk_tokens)
        scale = record.output_len / counted if counted and record.output_len != counted else 1.0
        for arrival, new_tokens in zip(record.chunk_times, record.chunk_tokens, strict=True):
            second = int(arrival - origin)
            buckets[second] = buckets.get(second, 0.0) + new_tokens * scale
    return max(buckets.values())


def accept_length(records: Sequence[RequestRecord]) -> float | None:
    """Output tokens per verify step over the requests whose server reported spec_verify_ct.

    The token-weighted mean of each request's spec_accept_length (= completion_tokens / spec_verify_ct).
    """
    tokens = 0
    verify_steps = 0
    for record in records:
        if record.succeeded and record.spec_verify_ct:
            tokens += record.output_len
            verify_steps += record.spec_verify_ct
    return tokens / verify_steps if verify_steps else None


def mean_request_accept_length(records: Sequence[RequestRecord]) -> float | None:
    """The mean of each request's own accept length (completion_tokens / spec_verify_ct), every request weighing
    the same: it differs from `accept_length` when short and long requests accept differently, and the two can
    rank configs differently."""
    lengths = [r.output_len / r.spec_verify_ct for r in records if r.succeeded and r.spec_verify_ct]
    return sum(lengths) / len(lengths) if lengths else None


def drafts_histogram(records: Sequence[RequestRecord]) -> list[int] | None:
    """The accepted-drafts histogram of the requests that reported one, summed: index i is the number of verify
    steps that accepted exactly i drafts. None when no request reported one (an older SGLang, a baseline)."""
    total: list[int] = []
    for record in records:
        histogram = record.spec_drafts_histogram
        if not record.succeeded or histogram is None:
            continue
        if len(histogram) > len(total):
            total.extend([0] * (len(histogram) - len(total)))
        for accepted, steps in enumerate(histogram):
            total[accepted] += steps
    return total if sum(total) > 0 else None


def position_acceptance(histogram: Sequence[int] | None) -> list[float] | None:
    """Per draft position j = 1, 2, ...: the share of verify steps that accepted at least j drafts, i.e. how often
    the j-th draft token was accepted (a draft counts only if every one before it was). One rate per position the
    histogram can hold; None without a histogram or without verify steps."""
    if not histogram:
        return None
    steps = sum(histogram)
    if steps <= 0:
        return None
    rates = []
    at_least = steps
    for accepted in histogram[:-1]:
        at_least -= accepted
        rates.append(at_least / steps)
    return rates


def by_category(records: Sequence[RequestRecord]) -> dict[str, dict[str, Any]]:
    """Per prompt category: requests, output tokens, accept length (as `accept_length`), the mean of each
    request's decode speed (output tokens / e2e latency), the figure that compares categories within one run, and
    the accepted-drafts histogram with its per-position acceptance."""
    groups: dict[str, list[RequestRecord]] = {}
    for record in records:
        if record.succeeded and record.category is not None:
            groups.setdefault(record.category, []).append(record)
    out: dict[str, dict[str, Any]] = {}
    for category, members in sorted(groups.items()):
        speeds = [r.output_len / (r.end - r.start) for r in members if r.end > r.start]
        histogram = drafts_histogram(members)
        out[category] = {
            "requests": len(members),
            "output_tokens": sum(r.output_len for r in members),
            "accept_length": accept_length(members),
            "mean_request_tok_s": math.fsum(speeds) / len(speeds) if speeds else None,
            "accepted_drafts_histogram": histogram,
            "position_acceptance": position_acceptance(histogram),
        }
    return out


def request_rows(records: Sequence[RequestRecord], *, split_itl: bool) -> list[dict[str, Any]]:
    """One row per measured request, in sending order: the per-prompt results (and outputs, when kept) and the
    request's own latencies in ms (ttft, tpot, itl: the mean of its gaps, e2e_latency), what goodput judges each
    request by. A failed request's latencies are None; so are TPOT and ITL of a one-token answer."""
    rows = []
    for record in records:
        row: dict[str, Any] = {
            "index": record.prompt_index,
            "category": record.category,
            "ok": record.succeeded,
            "output_len": record.output_len,
            "accept_length": record.output_len / record.spec_verify_ct if record.spec_verify_ct else None,
            # What the degenerate-benchmark checks read (experiments/analysis/degenerate.py), a few bytes a request.
            "loop_at": record.loop_at,
            "loop_period": record.loop_period,
            "loop_unit": record.loop_unit,
            "prompt_digest": record.prompt_digest,
            "prompt_repeat_share": record.prompt_repeat_share,
            "prompt_tokens": record.server_prompt_tokens,
        }
        row |= _latencies_ms(record, split_itl=split_itl)
        if record.keep_output:
            row["output_ids"] = record.output_ids
        rows.append(row)
    return rows


def _latencies_ms(record: RequestRecord, *, split_itl: bool) -> dict[str, float | None]:
    if not record.succeeded or not record.chunk_times:
        return dict.fromkeys(REQUEST_LATENCY_KEYS)
    timing = request_timings(record, split_itl=split_itl)
    return {
        "ttft_ms": timing.ttft * 1000.0,
        "tpot_ms": None if timing.tpot is None else timing.tpot * 1000.0,
        "itl_ms": math.fsum(timing.itl) / len(timing.itl) * 1000.0 if timing.itl else None,
        "e2e_latency_ms": timing.latency * 1000.0,
    }


REQUEST_LATENCY_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms")


def summarize(records: Sequence[RequestRecord], *, duration: float, split_itl: bool) -> dict[str, Any]:
    """The result fields computed from the measured (non-warm-up) requests and the wall-clock duration."""
    succeeded = [record for record in records if record.succeeded]
    failed = [record for record in records if not record.succeeded]
    timings = [request_timings(record, split_itl=split_itl) for record in succeeded]
    total_input = sum(record.prompt_len for record in succeeded)
    total_output = sum(record.output_len for record in succeeded)
    e2e = [timing.latency for timing in timings]

    def per_second(amount: float) -> float:
        return amount / duration if duration > 0 else 0.0

    errors: list[str] = []
    for record in failed:
        if record.error not in errors and len(errors) < MAX_ERRORS_KEPT:
            errors.append(record.error or "unknown error")
    result: dict[str, Any] = {
        "completed": len(succeeded),
        "failed": len(failed),
        "errors": errors,
        "duration_s": duration,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": per_second(len(succeeded)),
        "input_throughput": per_second(total_input),
        "output_throughput": per_second(total_output),
        "total_throughput": per_second(total_input + total_output),
    }
    result |= _distribution_ms("ttft", [timing.ttft for timing in timings])
    result |= _distribution_ms("tpot", [timing.tpot for timing in timings if timing.tpot is not None])
    result |= _distribution_ms("itl", [gap for timing in timings for gap in timing.itl])
    result |= _distribution_ms("e2e_latency", e2e)
    result["concurrency_achieved"] = per_second(math.fsum(e2e))
    result["accept_length"] = accept_length(records)
    result["mean_request_accept_length"] = mean_request_accept_length(records)
    histogram = drafts_histogram(records)
    result["accepted_drafts_histogram"] = histogram
    result["position_acceptance"] = position_acceptance(histogram)
    result["max_output_tokens_per_s"] = max_output_tokens_per_s(records)
    if any(record.category is not None or record.keep_output for record in records):
        result["categories"] = by_category(records)
    # Every cell's requests, for goodput under an SLO set (or changed) after the measurement.
    result["requests"] = request_rows(records, split_itl=split_itl)
    return result
