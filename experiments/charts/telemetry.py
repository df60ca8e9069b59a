"""The run page's GPU telemetry figure: SM clock, temperature and power of each GPU against time, with the
benchmark cells as shaded spans on the same time axis and throttled samples marked. Pure, like `charts`: data in,
a JSON-ready Plotly figure dict out (written by hand for the reasons `charts` gives)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from plotly.colors import qualitative

from experiments.analysis.telemetry import THROTTLE_MASK, GpuReading, throttle_names

GRID_COLOR = "#e5e9f0"
CELL_COLOR = "rgba(99, 110, 250, 0.10)"
THROTTLE_COLOR = "#d62728"
# (attribute, panel title, y axis): one panel each, stacked, sharing the time axis.
PANELS = (
    ("sm_mhz", "SM clock (MHz)", "y"),
    ("temperature_c", "Temperature (°C)", "y2"),
    ("power_w", "Power (W)", "y3"),
)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds")


def telemetry_figure(samples: Sequence[GpuReading], cells: Sequence[tuple[float, float, str]]) -> dict[str, Any]:
    """`samples` oldest first; `cells`: (start, end, label) of each benchmark cell, in the same clock."""
    # The run's GPUs (those that held memory); every GPU when none did (the run never loaded).
    used = {s.gpu for s in samples if s.memory_used_mib}
    samples = [s for s in samples if s.gpu in used] if used else samples
    gpus = sorted({s.gpu for s in samples})
    traces: list[dict[str, Any]] = []
    for position, gpu in enumerate(gpus):
        mine = [s for s in samples if s.gpu == gpu]
        color = qualitative.Plotly[position % len(qualitative.Plotly)]
        for attribute, title, axis in PANELS:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"GPU {gpu}",
                    "legendgroup": f"gpu{gpu}",
                    "showlegend": axis == "y",
                    "x": [_iso(s.t) for s in mine],
                    "y": [getattr(s, attribute) for s in mine],
                    "yaxis": axis,
                    "line": {"color": color, "width": 1.5},
                    "hovertemplate": f"GPU {gpu} %{{x}}<br>{title}: %{{y}}<extra></extra>",
                }
            )
    throttled = [s for s in samples if s.reasons is not None and s.reasons & THROTTLE_MASK]
    if throttled:
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "throttled",
                "x": [_iso(s.t) for s in throttled],
                "y": [s.sm_mhz for s in throttled],
                "yaxis": "y",
                "marker": {"color": THROTTLE_COLOR, "size": 6, "symbol": "x"},
                "text": [", ".join(throttle_names(s.reasons or 0)) for s in throttled],
                "hovertemplate": "GPU throttled %{x}<br>%{text}<extra></extra>",
            }
        )
    shapes = [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": _iso(start),
            "x1": _iso(end),
            "y0": 0,
            "y1": 1,
            "fillcolor": CELL_COLOR,
            "line": {"width": 0},
            "layer": "below",
        }
        for start, end, _ in cells
    ]
    annotations = [
        {
            "x": _iso((start + end) / 2),
            "y": 1.0,
            "xref": "x",
            "yref": "paper",
            "yanchor": "bottom",
            "text": label,
            "showarrow": False,
            "font": {"size": 10},
        }
        for start, end, label in cells
    ]
    grid: dict[str, Any] = {"gridcolor": GRID_COLOR, "zeroline": False}
    return {
        "data": traces,
        "layout": {
            "title": {"text": "GPU telemetry (shaded: benchmark cells)"},
            "height": 520,
            "margin": {"t": 70, "r": 20, "b": 40, "l": 70},
            "plot_bgcolor": "white",
            "hovermode": "closest",
            "xaxis": {**grid, "type": "date", "title": {"text": "time (UTC)"}},
            "yaxis": {**grid, "domain": [0.68, 1.0], "title": {"text": PANELS[0][1]}},
            "yaxis2": {**grid, "domain": [0.34, 0.62], "title": {"text": PANELS[1][1]}},
            "yaxis3": {**grid, "domain": [0.0, 0.28], "title": {"text": PANELS[2][1]}},
            "shapes": shapes,
            "annotations": annotations,
            "legend": {"orientation": "h", "y": -0.12},
        },
    }
