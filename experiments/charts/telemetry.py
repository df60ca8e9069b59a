"""The run page's time series: the GPU telemetry figure (SM clock, temperature and power of each GPU, throttled
samples marked) and the server metrics figure (its Prometheus gauges), each with the benchmark cells as shaded spans
on the same time axis. Pure, like `charts`: data in, a JSON-ready Plotly figure dict out (written by hand for the
reasons `charts` gives)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from plotly.colors import qualitative

from experiments.analysis.telemetry import THROTTLE_MASK, GpuReading, ServerMetricReading, throttle_names

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


def _cell_spans(cells: Sequence[tuple[float, float, str]]) -> dict[str, Any]:
    """The layout's shaded span and label of each benchmark cell, across every panel."""
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
    return {"shapes": shapes, "annotations": annotations}


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
            **_cell_spans(cells),
            "legend": {"orientation": "h", "y": -0.12},
        },
    }


# (trace name, reading attribute, scale, panel): the server's gauges, stacked by panel on the cells' time axis.
SERVER_SERIES = (
    ("running", "num_running_reqs", 1, "Requests"),
    ("queued", "num_queue_reqs", 1, "Requests"),
    ("token usage", "token_usage", 100, "KV use (%)"),
    ("throughput", "gen_throughput", 1, "tok/s"),
    ("accept length", "spec_accept_length", 1, "Accept len"),
    ("spec steps", "spec_num_steps", 1, "Accept len"),
    ("accept rate", "spec_accept_rate", 1, "Accept rate"),
)
SPECULATIVE_PANELS = ("Accept len", "Accept rate")
PANEL_GAP = 0.05
SERVER_FIGURE_HEIGHT = 720  # the holder's height in specdash.css (#server-metrics .chart)


def server_metrics_figure(
    readings: Sequence[ServerMetricReading], cells: Sequence[tuple[float, float, str]], *, speculative: bool = False
) -> dict[str, Any]:
    """`readings` oldest first; `cells` as for `telemetry_figure`. A baseline's panels of speculative gauges (all
    absent or 0) are left out; `speculative` keeps them for samples still to come (a run not yet benchmarking).
    Each trace's `meta` names the gauge it draws and its scale: the page extends it from streamed samples."""
    speculative = speculative or any(r.spec_accept_length or r.spec_num_steps for r in readings)
    panels = [
        p for p in dict.fromkeys(panel for *_, panel in SERVER_SERIES) if speculative or p not in SPECULATIVE_PANELS
    ]
    height = (1 - PANEL_GAP * (len(panels) - 1)) / len(panels)
    layout_axes: dict[str, Any] = {}
    grid: dict[str, Any] = {"gridcolor": GRID_COLOR, "zeroline": False}
    for index, panel in enumerate(panels):
        top = 1 - index * (height + PANEL_GAP)
        key = "yaxis" if index == 0 else f"yaxis{index + 1}"
        layout_axes[key] = {**grid, "domain": [max(top - height, 0.0), top], "title": {"text": panel}}
    traces = []
    for position, (name, attribute, scale, panel) in enumerate(SERVER_SERIES):
        if panel not in panels:
            continue
        index = panels.index(panel)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv", "width": 1.5, "color": qualitative.Plotly[position % len(qualitative.Plotly)]},
                "name": name,
                "meta": {"field": attribute, "scale": scale},
                "x": [_iso(r.t) for r in readings],
                "y": [None if (v := getattr(r, attribute)) is None else v * scale for r in readings],
                "yaxis": "y" if index == 0 else f"y{index + 1}",
                "hovertemplate": f"%{{x}}<br>{name}: %{{y}}<extra></extra>",
            }
        )
    return {
        "data": traces,
        "layout": {
            "title": {"text": "Server metrics (/metrics every few hundred ms; shaded: benchmark cells)"},
            "height": SERVER_FIGURE_HEIGHT,
            "margin": {"t": 70, "r": 20, "b": 40, "l": 70},
            "plot_bgcolor": "white",
            "hovermode": "x unified",
            # Under the bottom panel: the axis Plotly would otherwise draw under the first (top) one.
            "xaxis": {
                **grid,
                "type": "date",
                "title": {"text": "time (UTC)"},
                "anchor": f"y{len(panels)}" if len(panels) > 1 else "y",
            },
            **layout_axes,
            **_cell_spans(cells),
            "legend": {"orientation": "h", "y": -0.12},
        },
    }
