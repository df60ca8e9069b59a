"""Steady-state figures of a benchmark cell, as the benchmark client reports them (workers/benchclient/steady_state.py
computes them on the GPU host), checked before they are stored. Pure.

- **steady_state_window_s**: the length of the longest stretch of the cell with at least 80% of its concurrency in
  flight (SGLang's steady_state_serving ratio): the ramp-up and the tail left out; at concurrency 1, the busy span.
- **steady_state_output_throughput**: the output tokens that arrived in that window over its length.
- **steady_state_accept_length**: the window's output tokens over the verify steps behind them (each request's
  steps attributed in proportion to its tokens in the window); None for a non-speculative config.

All three are None when no window qualified or it was too short to be a rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

KEYS = ("steady_state_output_throughput", "steady_state_window_s", "steady_state_accept_length")


def _non_negative(value: Any) -> float | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)  # an integer past float's range overflows
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def checked_figures(result: Mapping[str, Any]) -> tuple[dict[str, float | None], list[str]]:
    """The steady-state figures of a cell result, each a finite non-negative number or None (absent, or not a
    number the window can have), and one problem per figure that was reported but refused."""
    figures: dict[str, float | None] = {}
    refused: list[str] = []
    for key in KEYS:
        value = result.get(key)
        figures[key] = _non_negative(value)
        if value is not None and figures[key] is None:
            refused.append(key)
    problems = (
        [f"The cell's steady-state figures were not all stored: {', '.join(refused)} refused."] if refused else []
    )
    return figures, problems
