"""The explanatory model of speculative decoding: what acceptance length a config needs to pay for itself.

One EAGLE cycle runs the draft model `steps` times and the target model once to verify; it yields `accept length`
tokens per request (the accepted draft tokens plus the target's own). So per request

    candidate tok/s = accept length / (draft time x steps + verify time)
    baseline tok/s  = 1 / decode step time

and speculation breaks even at accept length = (draft x steps + verify) / baseline step time. The baseline step
time at a concurrency comes from the measured throughput there: every request advances one token per step, so
step = concurrency / aggregate tok/s. Draft and verify times come from the server's log (custom log metrics, or
simhost's profile lines), measured at the same concurrency.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class BreakEven:
    """The acceptance length a speculative config needs to match the baseline, and what it predicts.

    Times are in milliseconds: `draft_ms` per draft step, `verify_ms` per verify pass, `baseline_step_ms` per
    baseline decode step. `needed_accept_length` is the break-even accept length. `accept_length`,
    `predicted_speedup` (model candidate / baseline) and `predicted_tok_s` (aggregate, at the given concurrency)
    are None when no accept length was measured. `message` says it in one sentence for the page.
    """

    accept_length: float | None
    needed_accept_length: float
    draft_ms: float
    verify_ms: float
    steps: int
    baseline_step_ms: float
    predicted_speedup: float | None
    message: str
    predicted_tok_s: float | None = None


def break_even_accept_length(
    *,
    baseline_tok_s: float,
    concurrency: int,
    draft_ms: float,
    verify_ms: float,
    steps: int,
    accept_length: float | None = None,
) -> BreakEven:
    """The break-even accept length for a config at one concurrency, and the model's prediction if the measured
    `accept_length` is given.

    `baseline_tok_s` is the baseline's aggregate output throughput at `concurrency` (as in the comparison rows).
    Raises ValueError for a throughput, accept length or verify time that is not positive and finite, a negative
    or non-finite draft time, concurrency < 1 or steps < 0.
    """
    for name, value in (("baseline_tok_s", baseline_tok_s), ("verify_ms", verify_ms)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive and finite, got {value!r}")
    if not (math.isfinite(draft_ms) and draft_ms >= 0):
        raise ValueError(f"draft_ms must be non-negative and finite, got {draft_ms!r}")
    if accept_length is not None and not (math.isfinite(accept_length) and accept_length > 0):
        raise ValueError(f"accept_length must be positive and finite, got {accept_length!r}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if steps < 0:
        raise ValueError(f"steps must be non-negative, got {steps}")

    baseline_step_ms = 1000 * concurrency / baseline_tok_s
    cycle_ms = draft_ms * steps + verify_ms
    needed = cycle_ms / baseline_step_ms
    message = (
        f"Breaks even at accept length {needed:.2f}: {steps} x {draft_ms:.2f} ms draft + {verify_ms:.2f} ms verify"
        f" = {cycle_ms:.2f} ms per cycle, against {baseline_step_ms:.2f} ms per baseline token."
    )
    if accept_length is None:
        return BreakEven(
            None, needed, draft_ms, verify_ms, steps, baseline_step_ms, None, message + " No accept length measured."
        )

    speedup = accept_length / needed
    predicted_tok_s = baseline_tok_s * speedup
    verdict = "pays" if speedup >= 1 else "does not pay"
    message += (
        f" Measured accept length {accept_length:.2f} predicts {predicted_tok_s:.1f} tok/s,"
        f" {speedup:.2f}x the baseline: speculation {verdict}."
    )
    return BreakEven(
        accept_length, needed, draft_ms, verify_ms, steps, baseline_step_ms, speedup, message, predicted_tok_s
    )
