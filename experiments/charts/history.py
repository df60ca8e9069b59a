"""The history figure: one config's throughput (and a speculative config's accept length) run after run on a time
axis, one small multiple per metric and concurrency, with its flags, suspicions and pinned baseline marked. Pure,
like `charts`, whose styling it shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from experiments.charts.comparison import (
    IMPROVEMENT_COLOR,
    REGRESSION_COLOR,
    SUSPECTED_COLOR,
    _axis,
    _layout,
    escape_text,
)


class HistoryEntry(NamedTuple):
    """One point of a history series: when its run finished (ISO 8601), its label, its value (tok/s or accept
    length), and its page."""

    at: str
    label: str
    value: float
    url: str


class _Panel(NamedTuple):
    """One small multiple: a metric at one concurrency, with its marks (point index, direction, text)."""

    name: str
    axis_title: str
    hover: str
    points: Sequence[HistoryEntry]
    marks: list[tuple[int, str, str]]


def _marks_of(flags: Sequence[tuple[int, int, str, str]], level: int) -> list[tuple[int, str, str]]:
    return [(index, direction, text) for lvl, index, direction, text in flags if lvl == level]


HISTORY_ROW_HEIGHT = 190  # px per concurrency level: the small multiples stay readable however many there are
HISTORY_ROW_GAP = 0.06


def history_figure(
    series: Mapping[int, Sequence[HistoryEntry]],
    flags: Sequence[tuple[int, int, str, str]],
    *,
    title: str,
    pinned: tuple[str, str] | None = None,
    acceptance: Mapping[int, Sequence[HistoryEntry]] | None = None,
    acceptance_flags: Sequence[tuple[int, int, str, str]] = (),
) -> dict[str, Any]:
    """A history on a time axis, one small multiple per concurrency (sharing the time axis), each point linked to
    its run (`customdata`: the page a click opens). `flags` are (concurrency, point index, direction, text): a flag
    is marked where the new level starts (down triangle for a regression, up for an improvement); "suspected"
    marks a suspicion (an open circle). `pinned` = (ISO time, text) draws when the baseline was pinned.
    `acceptance` (a speculative config's accept length per concurrency, with `acceptance_flags` marked alike)
    adds one small multiple per concurrency below the throughput ones."""
    panels = [
        _Panel(f"c={level}", f"c={level} tok/s", "%{y:.1f} tok/s", series[level], _marks_of(flags, level))
        for level in sorted(series)
        if series[level]
    ]
    for level in sorted(acceptance or {}):
        if acceptance and acceptance[level]:
            marks = _marks_of(acceptance_flags, level)
            label = f"c={level} accept length"
            panels.append(_Panel(label, f"c={level} accept len", "%{y:.2f} tokens/step", acceptance[level], marks))
    rows = max(len(panels), 1)
    height = (1 - HISTORY_ROW_GAP * (rows - 1)) / rows
    traces: list[dict[str, Any]] = []
    axes: dict[str, Any] = {}
    for row, panel in enumerate(panels):
        yaxis = "y" if row == 0 else f"y{row + 1}"
        top = 1 - row * (height + HISTORY_ROW_GAP)
        axes["yaxis" if row == 0 else f"yaxis{row + 1}"] = _axis(
            panel.axis_title, domain=[max(top - height, 0), top], rangemode="tozero"
        )
        points = panel.points
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": panel.name,
                "xaxis": "x",
                "yaxis": yaxis,
                "x": [p.at for p in points],
                "y": [p.value for p in points],
                "text": [escape_text(p.label) for p in points],
                "customdata": [p.url for p in points],
                "hovertemplate": "%{text}<br>%{x}<br>" + panel.hover + "<extra>" + panel.name + "</extra>",
            }
        )
        for direction, color, symbol in (
            ("regression", REGRESSION_COLOR, "triangle-down"),
            ("improvement", IMPROVEMENT_COLOR, "triangle-up"),
            ("suspected", SUSPECTED_COLOR, "circle-open"),
        ):
            shown = [(index, text) for index, d, text in panel.marks if d == direction and 0 <= index < len(points)]
            if shown:
                traces.append(
                    {
                        "type": "scatter",
                        "mode": "markers",
                        "name": direction,
                        "legendgroup": direction,
                        "showlegend": not any(t.get("legendgroup") == direction for t in traces),
                        "xaxis": "x",
                        "yaxis": yaxis,
                        "x": [points[index].at for index, _ in shown],
                        "y": [points[index].value for index, _ in shown],
                        "text": [escape_text(text) for _, text in shown],
                        "customdata": [points[index].url for index, _ in shown],
                        "marker": {
                            "color": color,
                            "size": 14,
                            "symbol": symbol,
                            "line": {"width": 1, "color": "#101828"},
                        },
                        "hovertemplate": "%{text}<extra></extra>",
                    }
                )
    bottom = "y" if rows == 1 else f"y{rows}"
    layout = _layout(
        escape_text(title),
        xaxis=_axis("Run finished (UTC)", type="date", anchor=bottom),
        legend={"orientation": "h"},
        height=HISTORY_ROW_HEIGHT * rows + 110,
        **(axes or {"yaxis": _axis("Output throughput (tok/s)", rangemode="tozero")}),
    )
    if pinned is not None:
        at, text = pinned
        layout["shapes"] = [
            {"type": "line", "xref": "x", "yref": "paper", "x0": at, "x1": at, "y0": 0, "y1": 1,
             "line": {"color": SUSPECTED_COLOR, "dash": "dot", "width": 1}}
        ]  # fmt: skip
        layout["annotations"] = [
            {"x": at, "xref": "x", "y": 1, "yref": "paper", "yanchor": "bottom", "showarrow": False,
             "text": escape_text(text), "font": {"size": 11, "color": SUSPECTED_COLOR}}
        ]  # fmt: skip
    return {"data": traces, "layout": layout}
