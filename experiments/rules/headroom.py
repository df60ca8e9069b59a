"""The accept lengths an acceptance headroom study may simulate for a speculative config. Pure (no Django).

A verify step accepts between 1 token (every draft rejected, the target's own token) and steps + 1 (every draft
accepted, plus the bonus token), so SGLANG_SIMULATE_ACC_LEN is bounded to that range for the chosen config; the
default sweep walks it in halves from 1.5. A value is written as the launch environment carries it: a plain decimal
string that `launch_env`'s Float rule accepts, never what the user typed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

SIMULATE_ENV = "SGLANG_SIMULATE_ACC_LEN"
# Every verify step accepts the set length on average (its fraction by a coin): the curve's x is the accept length
# the runs measure. SGLang before 0.5.23 defaults to `multinomial`, a clamped normal draw around the length whose
# mean is not the length (2.6 for a set 3.0 at 2 steps), so the study always names its method.
METHOD_ENV = "SGLANG_SIMULATE_ACC_METHOD"
METHOD = "match-expected"
MIN_ACCEPT_LENGTH = 1.0
MAX_LENGTHS = 12  # launches: each accept length is one more server launch per round
STEP = 0.5


def default_accept_lengths(steps: int) -> list[float]:
    """1.5, 2, 2.5 ... up to steps + 1 (in wider strides where that would be more than MAX_LENGTHS launches)."""
    top = steps + 1
    if top < 1.5:
        return [float(top)]
    stride = STEP * math.ceil((round((top - 1.5) / STEP) + 1) / MAX_LENGTHS)
    lengths = []
    length = 1.5
    while length <= top + 1e-9:
        lengths.append(round(length, 2))
        length += stride
    return lengths


def accept_length_refusals(values: Iterable[float], steps: int) -> list[str]:
    """Why these accept lengths may not be simulated for a config of `steps` draft steps (empty: they may)."""
    values = list(values)
    top = steps + 1
    if not values:
        return ["Give at least one accept length."]
    if len(values) > MAX_LENGTHS:
        return [f"At most {MAX_LENGTHS} accept lengths (each is one more launch)."]
    problems = []
    for value in values:
        if not (math.isfinite(value) and MIN_ACCEPT_LENGTH <= value <= top):
            problems.append(
                f"Accept length {value!r} is outside 1 to {top}: with {steps} draft steps a verify step accepts "
                f"1 to {top} tokens."
            )
    if len(set(values)) != len(values):
        problems.append("Each accept length once.")
    return problems


def env_value(length: float) -> str:
    """The launch environment's text of an accept length: at most two decimals, no exponent."""
    return f"{length:.2f}".rstrip("0").rstrip(".")


def simulated_env(env: dict[str, str], length: float) -> dict[str, str]:
    """A config's environment with its accept length simulated at `length`."""
    return {**env, SIMULATE_ENV: env_value(length), METHOD_ENV: METHOD}


def simulated_length(env: object) -> float | None:
    """The accept length a config's environment simulates, or None when it simulates none (unset, or SGLang's
    -1 "off")."""
    raw = env.get(SIMULATE_ENV) if isinstance(env, dict) else None
    if raw is None:
        return None
    try:
        length = float(str(raw))
    except ValueError:
        return None
    return length if math.isfinite(length) and length > 0 else None
