"""Plotly figures for the comparison page, as plain JSON-ready dicts.

Pure: data in, figure dict out. The page hands the dict to `Plotly.newPlot` through Django's `json_script`, so
every value must survive the standard `json` module.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative

from experiments.analysis import INCONCLUSIVE, ComparisonRow

BASELINE_COLOR = "#555555"
# Candidates take colours by position, so the same candidate looks the same in both figures when the caller
# lists candidates in the same order.
CANDIDATE_COLORS = qualitative.Plotly
# plotly.js turns a JSON null in an error array into 0 and draws a zero-length bar, which reads as "no
# uncertainty"; a non-numeric entry becomes NaN there and draws no bar, which is the truth for a point
# without an interval.
NO_ERROR_BAR = "NaN"

ThroughputPoint = tuple[int, float, float | None, float | None]


def throughput_figure(series: Mapping[str, Sequence[ThroughputPoint]], *, baseline: str) -> dict[str, Any]:
    """Output throughput against concurrency, one line per config.

    `series` maps a config name to (concurrency, mean tok/s, low, high) points; low and high give an error bar
    when both are set. The baseline, if present, is drawn first, dashed and grey; the others follow in mapping
    order.
    """
    fig = go.Figure()
    others = [name for name in series if name != baseline]
    for name in ([baseline] if baseline in series else []) + others:
        points = sorted(series[name], key=lambda point: point[0])
        is_baseline = name == baseline
        color = BASELINE_COLOR if is_baseline else _candidate_color(others.index(name))
        fig.add_trace(
            go.Scatter(
                name=name,
                x=[point[0] for point in points],
                y=[point[1] for point in points],
                mode="lines+markers",
                line={"color": color, "dash": "dash" if is_baseline else "solid"},
                error_y=_error_bars([(mean, low, high) for _, mean, low, high in points]),
                hovertemplate="concurrency %{x}: %{y:.1f} tok/s",
            )
        )
    levels = sorted({point[0] for points in series.values() for point in points})
    fig.update_layout(
        title={"text": "Output throughput vs concurrency"},
        xaxis=_concurrency_axis(levels),
        yaxis={"title": {"text": "Output throughput (tok/s)"}, "rangemode": "tozero"},
        template="plotly_white",
    )
    return _plain(fig.to_plotly_json())


def speedup_figure(rows: Sequence[ComparisonRow]) -> dict[str, Any]:
    """Speedup against concurrency, one line per candidate, with the 95% interval as error bars.

    A dashed line marks 1.0 (the baseline); inconclusive points are drawn hollow so a reader does not take
    them for results.
    """
    fig = go.Figure()
    candidates = list(dict.fromkeys(row.candidate for row in rows))
    for position, candidate in enumerate(candidates):
        own = sorted((row for row in rows if row.candidate == candidate), key=lambda row: row.concurrency)
        fig.add_trace(
            go.Scatter(
                name=candidate,
                x=[row.concurrency for row in own],
                y=[row.speedup for row in own],
                mode="lines+markers",
                line={"color": _candidate_color(position)},
                marker={
                    "size": 9,
                    "symbol": ["circle-open" if row.verdict == INCONCLUSIVE else "circle" for row in own],
                },
                error_y=_error_bars([(row.speedup, row.ci_low, row.ci_high) for row in own]),
                customdata=[[row.verdict] for row in own],
                hovertemplate="concurrency %{x}: %{y:.3f}x, %{customdata[0]}",
            )
        )
    fig.add_hline(y=1.0, line={"color": BASELINE_COLOR, "dash": "dash", "width": 1})
    levels = sorted({row.concurrency for row in rows})
    fig.update_layout(
        title={"text": "Speedup vs baseline"},
        xaxis=_concurrency_axis(levels),
        yaxis={"title": {"text": "Speedup (candidate / baseline)"}},
        template="plotly_white",
    )
    return _plain(fig.to_plotly_json())


def _candidate_color(position: int) -> str:
    return CANDIDATE_COLORS[position % len(CANDIDATE_COLORS)]


def _error_bars(points: Sequence[tuple[float, float | None, float | None]]) -> dict[str, Any]:
    """Asymmetric error bars from (centre, low, high); invisible when no point has both bounds."""
    if not any(low is not None and high is not None for _, low, high in points):
        return {"visible": False}
    above: list[float | str] = []
    below: list[float | str] = []
    for centre, low, high in points:
        if low is None or high is None:
            above.append(NO_ERROR_BAR)
            below.append(NO_ERROR_BAR)
        else:
            above.append(high - centre)
            below.append(centre - low)
    return {"type": "data", "symmetric": False, "array": above, "arrayminus": below, "visible": True}


def _concurrency_axis(levels: Sequence[int]) -> dict[str, Any]:
    # Concurrency levels are usually powers of two: a log axis spaces them evenly, and ticks at exactly the
    # measured levels keep plotly from labelling values nobody ran.
    return {
        "title": {"text": "Concurrency"},
        "type": "log",
        "tickmode": "array",
        "tickvals": list(levels),
        "ticktext": [str(level) for level in levels],
    }


def _plain(value: Any) -> Any:
    """`value` with array-likes (numpy arrays, should plotly produce any) turned into lists."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    return value
