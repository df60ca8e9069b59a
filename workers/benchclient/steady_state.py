"""Steady-state figures of one benchmark cell: its output throughput and accept length over the longest stretch in
which the concurrency was held, the ramp-up and the tail left out (the idea of SGLang's steady_state_serving,
`--steady-state-concurrency-ratio 0.8`: reference §5.2).

Pure, like metrics.py: computed from the request records after the cell. The definitions:
- In flight at time t: the succeeded requests sent at or before t whose last token had not arrived (the same
  requests the whole-cell figures count).
- The window: the longest stretch with at least `ratio` x concurrency requests in flight. At concurrency 1 that is
  the whole busy span. A dip below the threshold shorter than the cell's median chunk interval does not end the
  stretch: it is the client handing a finished request's slot to the next one (the next send is taken after the
  previous request's end, one event-loop turn later), not a change of load, and no token interval is that short.
- Throughput: the output tokens that arrived in the window, (start, end], over its length; each chunk's tokens count
  at its arrival, as in max_output_tokens_per_s.
- Accept length: the window's output tokens over the verify steps behind them. A request's verify steps are
  attributed to the window in proportion to its tokens that arrived there. Chunk arrivals are not verify steps
  (a stream interval above 1, reads that bring several events, one chunk per text piece on the OpenAI endpoint),
  and a request's time in the window would weigh its steps by the batch size, which changes exactly at the
  window's edges; its tokens are what its verify steps produced.
- None for all three when no window qualifies or it is too short to be a rate: under MIN_WINDOW_S, or under
  MIN_WINDOW_INTERVALS of the cell's median chunk intervals. The accept length is None too when no request in the
  window reported verify steps (a non-speculative server).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .metrics import RequestRecord

# SGLang's steady_state_serving default.
DEFAULT_RATIO = 0.8
# A shorter window is clock jitter and event-loop turns more than a rate.
MIN_WINDOW_S = 0.2
MIN_WINDOW_INTERVALS = 3
KEYS = ("steady_state_output_throughput", "steady_state_window_s", "steady_state_accept_length")


def _scaled_chunks(record: RequestRecord) -> list[tuple[float, float]]:
    """(arrival, tokens) per chunk; per-chunk counts that do not add up to output_len (OpenAI streams, one per
    chunk) are scaled to it."""
    counted = sum(record.chunk_tokens)
    scale = record.output_len / counted if counted and record.output_len != counted else 1.0
    return [(at, n * scale) for at, n in zip(record.chunk_times, record.chunk_tokens, strict=True)]


def _median_chunk_interval(records: Sequence[RequestRecord]) -> float:
    gaps = [b - a for r in records for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)]
    return statistics.median(gaps) if gaps else 0.0


def held_window(
    records: Sequence[RequestRecord], concurrency: int, *, ratio: float = DEFAULT_RATIO, bridge_s: float = 0.0
) -> tuple[float, float] | None:
    """(start, end) of the longest stretch with at least ratio x concurrency of `records` in flight, dips under the
    threshold of at most `bridge_s` bridged; None when it never holds."""
    deltas: dict[float, int] = {}
    for record in records:
        if record.end > record.start:
            deltas[record.start] = deltas.get(record.start, 0) + 1
            deltas[record.end] = deltas.get(record.end, 0) - 1
    threshold = ratio * concurrency - 1e-9
    best: tuple[float, float] | None = None
    held_from: float | None = None  # start of the stretch being followed
    held_until = 0.0  # when it last fell under the threshold (while it is under)
    in_flight = 0
    for at in sorted(deltas):
        was_held = held_from is not None and in_flight >= threshold
        in_flight += deltas[at]
        if in_flight >= threshold:
            if held_from is None or (not was_held and at - held_until > bridge_s):
                held_from = at  # a new stretch (the dip was no hand-off)
        elif was_held:
            held_until = at
            if held_from is not None and (best is None or at - held_from > best[1] - best[0]):
                best = (held_from, at)
    return best


def figures(
    records: Sequence[RequestRecord], concurrency: int, *, ratio: float = DEFAULT_RATIO
) -> dict[str, float | None]:
    """The cell's steady_state_output_throughput (tok/s), steady_state_window_s and steady_state_accept_length."""
    succeeded = [r for r in records if r.succeeded and r.chunk_times and r.end > r.start]
    interval = _median_chunk_interval(succeeded)
    window = held_window(succeeded, concurrency, ratio=ratio, bridge_s=interval)
    none: dict[str, float | None] = dict.fromkeys(KEYS)
    if window is None:
        return none
    first, last = window
    length = last - first
    if length < MIN_WINDOW_S or length < MIN_WINDOW_INTERVALS * interval:
        return none
    tokens = 0.0
    spec_tokens = 0.0
    verify_steps = 0.0
    for record in succeeded:
        inside = sum(n for at, n in _scaled_chunks(record) if first < at <= last)
        tokens += inside
        if record.spec_verify_ct and record.output_len and inside:
            spec_tokens += inside
            verify_steps += record.spec_verify_ct * inside / record.output_len
    return {
        "steady_state_output_throughput": tokens / length,
        "steady_state_window_s": length,
        "steady_state_accept_length": spec_tokens / verify_steps if verify_steps else None,
    }
