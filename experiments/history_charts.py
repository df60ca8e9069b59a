"""Pure: a history series (and its flags) in, a Plotly figure dict out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

REGRESSION_COLOR, IMPROVEMENT_COLOR = "#c4320a", "#12805c"


def history_figure(
    series: Mapping[int, Sequence[tuple[str, float]]],
    flags: Sequence[tuple[int, int, str, str]],
    *,
    title: str,
) -> dict:
    """`series`: concurrency -> [(run label, tok/s)], oldest first; `flags`: (concurrency, point index, direction,
    text). One line per concurrency; flagged points are marked where the new level starts."""
    figure = go.Figure()
    for level, points in sorted(series.items()):
        figure.add_trace(
            go.Scatter(
                x=list(range(1, len(points) + 1)),
                y=[value for _, value in points],
                text=[label for label, _ in points],
                mode="lines+markers",
                name=f"c={level}",
                hovertemplate="%{text}<br>%{y:.1f} tok/s<extra>c=" + str(level) + "</extra>",
            )
        )
    for direction, color, symbol in (
        ("regression", REGRESSION_COLOR, "triangle-down"),
        ("improvement", IMPROVEMENT_COLOR, "triangle-up"),
    ):
        marks = [(level, index, text) for level, index, d, text in flags if d == direction and level in series]
        if not marks:
            continue
        figure.add_trace(
            go.Scatter(
                x=[index + 1 for _, index, _ in marks],
                y=[series[level][index][1] for level, index, _ in marks],
                text=[text for _, _, text in marks],
                mode="markers",
                name=direction,
                marker={"color": color, "size": 14, "symbol": symbol, "line": {"width": 1, "color": "#101828"}},
                hovertemplate="%{text}<extra></extra>",
            )
        )
    figure.update_layout(
        title=title,
        xaxis_title="Run (oldest first)",
        yaxis_title="Output throughput (tok/s)",
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        legend={"orientation": "h"},
    )
    return figure.to_plotly_json()
