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
"""

from __future__ import annotations

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
