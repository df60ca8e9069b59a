"""Pure: a study's search space coloured by result, one parallel-coordinates figure per concurrency (each measured
config a line through its parameter values, coloured by its speedup over the baseline there).

Drawn with SVG lines (scatter traces over one axis per parameter), not plotly.js's `parcoords`: that trace draws
with WebGL through regl, which compiles its shaders' glue from strings (`Function`), and the pages' policy allows no
string evaluation ('unsafe-eval'), so under it the lines would never be drawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from experiments.charts.comparison import escape_text

# Red below the baseline, grey at it (1.0), green above; the grey stays visible on a light and a dark card alike.
_STOPS: list[tuple[float, str]] = [(0.0, "#b42318"), (0.5, "#98a2b3"), (1.0, "#027a48")]
_COLORSCALE = [[position, color] for position, color in _STOPS]  # plotly.js's shape of it
_MARGIN = 0.06  # of an axis's height, above its highest and below its lowest value, so their labels fit


def space_figure(trials: Sequence[Mapping[str, Any]], concurrency: int) -> dict[str, Any] | None:
    """`trials`: {"config"?: name, "values": {parameter: value}, "speedups": {concurrency: speedup}} per measured
    config; None when fewer than two configs are measured at `concurrency` (nothing to compare). Each parameter is a
    vertical axis (x = its index) on which its values sit evenly spread in order (numbers by size, texts
    alphabetically), labelled beside the axis; the last axis is the speedup, centred on 1.0."""
    measured = [t for t in trials if t["speedups"].get(concurrency) is not None]
    if len(measured) < 2:
        return None
    speedups = [round(t["speedups"][concurrency], 4) for t in measured]
    spread = max(abs(s - 1) for s in speedups) or 0.01
    low, high = round(1 - spread, 4), round(1 + spread, 4)
    axes = [_axis(name, [t["values"].get(name) for t in measured]) for name in measured[0]["values"]]
    ends = {s: round((s - low) / (high - low), 4) for s in (low, 1.0, high)}
    axes.append(_Axis("speedup", ends, numeric=True, label="{:.3f}×"))
    labels = [escape_text(axis.name) for axis in axes]
    traces = []
    for trial, speedup in zip(measured, speedups, strict=True):
        values = [trial["values"].get(axis.name) for axis in axes[:-1]]
        heights = [axis.height(value) for axis, value in zip(axes, values, strict=False)]
        heights.append(round((speedup - low) / (high - low), 4))
        shown = ", ".join(f"{label} {escape_text(str(value))}" for label, value in zip(labels, values, strict=False))
        name = escape_text(str(trial.get("config") or ""))
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": list(range(len(axes))),
                "y": heights,
                "line": {"color": _color((speedup - low) / (high - low)), "width": 2},
                "marker": {"size": 6},
                "showlegend": False,
                "hovertemplate": f"{name + '<br>' if name else ''}{shown}<br>speedup {speedup:.3f}×<extra></extra>",
            }
        )
    # The colour bar: one invisible point per end of the scale, so plotly.js draws the scale beside the axes.
    traces.append(
        {
            "type": "scatter",
            "mode": "markers",
            "x": [0, 0],
            "y": [None, None],
            "marker": {"color": [low, high], "colorscale": _COLORSCALE, "cmin": low, "cmax": high, "showscale": True,
                       "colorbar": {"title": {"text": "speedup"}, "thickness": 12}},
            "hoverinfo": "skip",
            "showlegend": False,
        }
    )  # fmt: skip
    return {
        "data": traces,
        "layout": {
            "title": {"text": f"Search space at concurrency {concurrency} (each line a measured config)"},
            "height": 360,
            "margin": {"l": 60, "r": 40, "t": 70, "b": 40},
            "hovermode": "closest",
            "xaxis": {"tickvals": list(range(len(axes))), "ticktext": labels, "side": "top", "showgrid": True,
                      "gridwidth": 2, "zeroline": False, "range": [-0.6, len(axes) - 0.4], "fixedrange": True},
            "yaxis": {"visible": False, "range": [-_MARGIN, 1 + _MARGIN], "fixedrange": True},
            "annotations": [
                {"x": i, "y": height, "text": text, "xanchor": "right", "xshift": -4, "showarrow": False,
                 "font": {"size": 10}}
                for i, axis in enumerate(axes) for text, height in axis.ticks()
            ],
        },
    }  # fmt: skip


class _Axis:
    """One parameter's vertical axis: where each of its values sits (0 at the bottom, 1 at the top), keyed by the
    value itself on a numeric axis and by its text on any other."""

    def __init__(self, name: str, heights: Mapping[Any, float], *, numeric: bool, label: str = "{}") -> None:
        self.name, self.heights, self.numeric, self.label = name, heights, numeric, label

    def height(self, value: Any) -> float | None:
        return self.heights.get(value if self.numeric else str(value))

    def ticks(self) -> list[tuple[str, float]]:
        return [(escape_text(self.label.format(value)), height) for value, height in self.heights.items()]


def _axis(name: str, values: Sequence[Any]) -> _Axis:
    """Whole numbers spread by size (steps 1, 2 and 4 sit as far apart as they are); anything else as text, evenly
    in alphabetical order."""
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        lowest, highest = min(values), max(values)
        spread = {
            v: round((v - lowest) / (highest - lowest), 4) if highest > lowest else 0.5 for v in sorted(set(values))
        }
        return _Axis(name, spread, numeric=True)
    texts = sorted({str(v) for v in values})
    evenly = {t: round(i / (len(texts) - 1), 4) if len(texts) > 1 else 0.5 for i, t in enumerate(texts)}
    return _Axis(name, evenly, numeric=False)


def _color(position: float) -> str:
    """The colour scale's colour at `position` (0 to 1), interpolated between its stops."""
    position = min(1.0, max(0.0, position))
    for (left, start), (right, end) in pairwise(_STOPS):
        if position <= right:
            share = (position - left) / (right - left)
            mixed = (
                round(int(start[i : i + 2], 16) * (1 - share) + int(end[i : i + 2], 16) * share) for i in (1, 3, 5)
            )
            return "#" + "".join(f"{channel:02x}" for channel in mixed)
    return _STOPS[-1][1]
