"""Acceptance three ways, and when a disagreement means something is miscounted. Pure.

- **token-weighted** (`accept_length`): the cell's requests' output tokens over their verify steps, from each
  request's `meta_info` (`completion_tokens`, `spec_verify_ct`). What a decode step yields, on average, for these
  requests: the figure that throughput follows.
- **pooled** (`pooled_accept_length`): Δ`sglang:generation_tokens_total` / Δ`sglang:spec_verify_calls_total`, the
  server's Prometheus counters scraped after the client's warm-up and after the cell's last response. They count
  finished requests only, so over a cell the server served alone they count exactly the cell's requests: it must
  equal the token-weighted figure. A difference means other traffic on the server, requests still in flight, or
  a client that misread its responses.
- **mean of per-request means** (`mean_request_accept_length`): every request weighing the same, whatever its
  length. It differs from the other two when short and long requests accept differently (a short code completion
  accepts more than a long chat answer), legitimately; comparing configs on it can even flip a verdict, so it is
  shown beside the others, never in their place.

Per draft position, from each request's accepted-drafts histogram (`spec_correct_drafts_histogram` in `meta_info`,
`spec_accept_histogram` before 0.5.12, or `sglext.spec_tokens_details` on the OpenAI endpoints):
- **accepted-drafts histogram** (`accepted_drafts_histogram`): summed over the cell's requests, index i is the number
  of verify steps that accepted exactly i drafts. It adds up to the cell's verify steps.
- **position acceptance** (`position_acceptance`): for draft position j = 1, 2, ..., the share of verify steps that
  accepted at least j drafts: how often the j-th draft token was accepted (it counts only if every draft before it
  was). It falls with j; the rates summed are the accepted drafts per verify step, the accept length less one.

The benchmark client runs on the GPU host, so what it reports is checked here before it is stored.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

# Every acceptance figure specdash stores, by its column (the Measurement field and the API key), with the one name
# and definition the pages' glossary, the API's `acceptance_definitions` and the docs give it. An imported file's
# figure is stored under the definition it has (bench_serving's "Accept length" is the server's window; vLLM's
# `spec_decode_acceptance_length` the server's counters pooled; SpecForge's average a mean of requests).
DEFINITIONS: dict[str, tuple[str, str]] = {
    "accept_length": (
        "token-weighted",
        "the cell's requests' output tokens over their verify steps (each request's meta_info): what a decode step "
        "yields on average, the figure throughput follows; the verdicts' acceptance-collapse rule reads it",
    ),
    "pooled_accept_length": (
        "pooled",
        "the server's counters over the cell, Δsglang:generation_tokens_total / Δsglang:spec_verify_calls_total "
        "(vLLM: Δvllm:generation_tokens_total / Δvllm:spec_decode_num_drafts_total, the same tokens per verify step): "
        "finished requests only, so it must equal the token-weighted figure",
    ),
    "mean_request_accept_length": (
        "mean of requests",
        "every request weighing the same, whatever its length: differs when short and long requests accept "
        "differently, and can rank configs differently",
    ),
    "steady_state_accept_length": (
        "steady state",
        "token-weighted, over the longest stretch with at least 80% of the concurrency in flight; ramp-up and tail "
        "left out",
    ),
    "server_accept_length": (
        "server window",
        "internal_states[0].avg_spec_accept_length of /server_info after the cell, since the flush before it: what "
        "SGLang's bench_serving prints as its Accept length (vLLM: 1 + accepted / drafts over the cell, its Mean "
        "acceptance length, which leaves each request's prefill token out)",
    ),
}

# Pooled and token-weighted count the same tokens and steps; beyond this relative gap one of them miscounted.
AGREEMENT_TOLERANCE = 0.01


def disagreement(token_weighted: float | None, pooled: float | None) -> str | None:
    """What a cell says when its pooled and token-weighted accept lengths disagree beyond the tolerance, else None
    (also when either is missing: a server without --enable-metrics has no pooled figure)."""
    if token_weighted is None or pooled is None or token_weighted <= 0:
        return None
    gap = abs(pooled - token_weighted) / token_weighted
    if gap <= AGREEMENT_TOLERANCE:
        return None
    return (
        f"The server's counters give {pooled:.3f} tokens per verify step and the requests {token_weighted:.3f} "
        f"({gap:.1%} apart): something else ran on the server during the cell, or requests were still in flight."
    )


# A cell's (and each category's) per-position figures, as the benchmark client names them.
POSITION_KEYS = ("accepted_drafts_histogram", "position_acceptance")
# What the host may report per cell: more positions than any speculative config drafts is not a measurement.
MAX_POSITIONS = 64
MAX_STEPS = 10**15  # verify steps of one histogram bucket (JSON numbers stay exact integers far below this)
MAX_CATEGORIES = 1000
MAX_CATEGORY_CHARS = 200
# The host computes the rates from the histogram in floating point: they agree with ours to rounding.
RATE_TOLERANCE = 1e-9


class BadHostOutput(ValueError):
    """A figure the benchmark client sent that is not what it should be; the message says why."""


def position_rates(histogram: list[int]) -> list[float]:
    """Position acceptance of an accepted-drafts histogram with at least one verify step (`checked_histogram`)."""
    steps = sum(histogram)
    rates, at_least = [], steps
    for accepted in histogram[:-1]:
        at_least -= accepted
        rates.append(at_least / steps)
    return rates


def histogram_accept_length(histogram: list[int]) -> float:
    """Tokens per verify step of an accepted-drafts histogram with at least one verify step: each step emits its
    accepted drafts and one bonus token (a prompt category's accept length, over the steps it counts)."""
    return sum((accepted + 1) * steps for accepted, steps in enumerate(histogram)) / sum(histogram)


def checked_histogram(value: Any) -> list[int] | None:
    """An accepted-drafts histogram as reported, checked: None (not reported) or a list of 1 to MAX_POSITIONS + 1
    whole counts, not all zero; BadHostOutput otherwise."""
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_POSITIONS + 1:
        raise BadHostOutput(f"an accepted-drafts histogram must be a list of 1 to {MAX_POSITIONS + 1} counts")
    if not all(type(n) is int and 0 <= n <= MAX_STEPS for n in value):
        raise BadHostOutput("an accepted-drafts histogram must hold whole, non-negative counts")
    if not sum(value):
        raise BadHostOutput("an accepted-drafts histogram counts no verify step")
    return value


def checked_positions(value: Any, histogram: list[int] | None) -> list[float] | None:
    """Position acceptance as reported, checked: None (not reported) or at most MAX_POSITIONS finite shares in
    [0, 1], never rising, the rates `histogram` gives. BadHostOutput otherwise."""
    if value is None:
        return None
    if histogram is None:
        raise BadHostOutput("position acceptance came without the accepted-drafts histogram it is read from")
    if not isinstance(value, list) or len(value) > MAX_POSITIONS:
        raise BadHostOutput(f"position acceptance must be a list of at most {MAX_POSITIONS} rates")
    numbers = (int, float)
    if not all(isinstance(r, numbers) and not isinstance(r, bool) and math.isfinite(r) and 0 <= r <= 1 for r in value):
        raise BadHostOutput("position acceptance must hold finite shares between 0 and 1")
    rates = [float(r) for r in value]
    if any(later > earlier + RATE_TOLERANCE for earlier, later in itertools.pairwise(rates)):
        raise BadHostOutput("position acceptance rises with the position, which no histogram gives")
    expected = position_rates(histogram)
    if len(expected) != len(rates) or any(abs(a - b) > RATE_TOLERANCE for a, b in zip(expected, rates, strict=True)):
        raise BadHostOutput("position acceptance does not follow from the accepted-drafts histogram")
    return rates


def _checked_pair(figures: Mapping[str, Any]) -> tuple[list[int] | None, list[float] | None]:
    histogram = checked_histogram(figures.get("accepted_drafts_histogram"))
    return histogram, checked_positions(figures.get("position_acceptance"), histogram)


def position_fields(result: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The Measurement fields of per-position acceptance from a benchmark client's cell result, and what was wrong
    with it: a figure that fails its check is None (the cell's other figures are kept), with the reason why."""
    problems: list[str] = []
    fields: dict[str, Any] = {
        "accepted_drafts_histogram": None,
        "position_acceptance": None,
        "position_acceptance_by_category": None,
    }
    try:
        fields["accepted_drafts_histogram"], fields["position_acceptance"] = _checked_pair(result)
    except BadHostOutput as exc:
        problems.append(f"The cell's per-position acceptance was not stored: {exc}.")
    categories = result.get("categories")
    if isinstance(categories, Mapping):
        try:
            fields["position_acceptance_by_category"] = _checked_categories(categories)
        except BadHostOutput as exc:
            problems.append(f"The cell's per-position acceptance by prompt category was not stored: {exc}.")
    return fields, problems


def _checked_categories(categories: Mapping[Any, Any]) -> dict[str, dict[str, Any]] | None:
    if len(categories) > MAX_CATEGORIES:
        raise BadHostOutput(f"more than {MAX_CATEGORIES} categories")
    out: dict[str, dict[str, Any]] = {}
    for category, figures in categories.items():
        if not isinstance(category, str) or len(category) > MAX_CATEGORY_CHARS or not isinstance(figures, Mapping):
            raise BadHostOutput("a category is not a name with its figures")
        histogram, rates = _checked_pair(figures)
        if histogram is not None or rates is not None:
            out[category] = {"accepted_drafts_histogram": histogram, "position_acceptance": rates}
    return out or None


def with_checked_positions(result: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """`result` with its per-position figures, the cell's and each category's, replaced by the checked `fields` of
    `position_fields`: what failed its check (a NaN, say, which PostgreSQL's JSON refuses) is not kept anywhere."""
    kept = {**result, **{key: fields[key] for key in POSITION_KEYS}}
    categories = result.get("categories")
    if isinstance(categories, Mapping):
        checked = fields["position_acceptance_by_category"] or {}
        kept["categories"] = {
            name: {**figures, **checked.get(name, dict.fromkeys(POSITION_KEYS))}
            if isinstance(figures, Mapping)
            else figures
            for name, figures in categories.items()
        }
    return kept
