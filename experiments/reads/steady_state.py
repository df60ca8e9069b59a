"""Steady-state figures per cell on the experiment page: each cell's throughput over its steady-state window beside
the whole cell's, and the window beside the cell's duration (`analysis/steady_state.py` defines them). Read from the
measurements the report has already queried: no query of its own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


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
