"""Pure: an adaptive server switching its speculative steps over a verification run, from its `/metrics` samples:
`sglang:spec_num_steps` (top) above the requests running (bottom), one colour per launch, on seconds since the
launch's first sample, so the steps can be read against the batch that chose them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from plotly.colors import qualitative

from experiments.charts.comparison import escape_text

GRID_COLOR = "#e5e9f0"


def switching_figure(series: Mapping[str, Sequence[tuple[float, float | None, float | None]]]) -> dict[str, Any] | None:
    """`series`: per launch label, (seconds, spec_num_steps, num_running_reqs) oldest first; None when no sample
    holds a step count (nothing to show)."""
    if not any(steps is not None for points in series.values() for _, steps, _ in points):
        return None
    traces: list[dict[str, Any]] = []
    for position, (label, points) in enumerate(series.items()):
        color = qualitative.Plotly[position % len(qualitative.Plotly)]
        name = escape_text(label)
        x = [round(t, 3) for t, _, _ in points]
        traces.append(
            {"type": "scatter", "mode": "lines", "line": {"shape": "hv", "width": 2, "color": color},
             "name": name, "legendgroup": name, "x": x, "y": [s for _, s, _ in points], "yaxis": "y",
             "hovertemplate": "%{x:.1f} s<br>steps: %{y}<extra>" + name + "</extra>"}
        )  # fmt: skip
        traces.append(
            {"type": "scatter", "mode": "lines", "line": {"shape": "hv", "width": 1, "color": color, "dash": "dot"},
             "name": f"{name} running", "legendgroup": name, "showlegend": False, "x": x,
             "y": [r for _, _, r in points], "yaxis": "y2",
             "hovertemplate": "%{x:.1f} s<br>running: %{y}<extra>" + name + "</extra>"}
        )  # fmt: skip
    grid = {"gridcolor": GRID_COLOR, "zeroline": False}
    return {
        "data": traces,
        "layout": {
            "title": {"text": "The server's speculative steps (sglang:spec_num_steps) against its batch"},
            "height": 420,
            "margin": {"t": 60, "r": 20, "b": 50, "l": 60},
            "plot_bgcolor": "white",
            "hovermode": "x unified",
            "xaxis": {**grid, "title": {"text": "seconds since the launch's first sample"}, "anchor": "y2"},
            "yaxis": {**grid, "domain": [0.45, 1.0], "title": {"text": "steps"}, "dtick": 1, "rangemode": "tozero"},
            "yaxis2": {**grid, "domain": [0.0, 0.38], "title": {"text": "running"}, "rangemode": "tozero"},
            "legend": {"orientation": "h", "y": -0.2},
        },
    }
