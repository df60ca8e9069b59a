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
from collections.abc import Iterable, Mapping
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


# The experiment page's table: each cell's throughput over its steady-state window beside the whole cell's, and the
# window beside the cell's duration, from the measurement rows its report has already read.


def cells(values: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every cell whose client found a steady-state window, in the report's order."""
    rows = []
    for m in values:
        steady, whole = m["steady_state_output_throughput"], m["output_throughput"]
        if steady is None or m["steady_state_window_s"] is None:
            continue
        rows.append(
            {
                "config": m["run__config__name"],
                "launch": m["run__launch_index"],
                "pass_index": m["pass_index"],
                "concurrency": m["concurrency"],
                "output_throughput": whole,
                "steady_state_output_throughput": steady,
                # How much the ramp-up and the tail held the whole-cell figure down (or up), as signed text.
                "change": f"{(steady / whole - 1) * 100:+.1f}%" if whole and whole > 0 else None,
                "steady_state_window_s": m["steady_state_window_s"],
                "duration_s": m["duration_s"],
            }
        )
    return rows
