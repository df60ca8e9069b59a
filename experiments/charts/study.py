"""Pure: a study's search space coloured by result, one parallel-coordinates figure per concurrency (each measured
config a line through its parameter values, coloured by its speedup over the baseline there)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from experiments.charts.comparison import escape_text

# Red below the baseline, green above; 1.0 (the baseline) in the middle.
_COLORSCALE = [[0.0, "#b42318"], [0.5, "#f2f4f7"], [1.0, "#027a48"]]


def space_figure(trials: Sequence[Mapping[str, Any]], concurrency: int) -> dict[str, Any] | None:
    """`trials`: {"values": {parameter: value}, "speedups": {concurrency: speedup}} per measured config; None when
    fewer than two configs are measured at `concurrency` (nothing to compare)."""
    measured = [t for t in trials if t["speedups"].get(concurrency) is not None]
    if len(measured) < 2:
        return None
    dimensions = []
    for name in measured[0]["values"]:
        values = [t["values"].get(name) for t in measured]
        if all(isinstance(v, int) for v in values):
            dimensions.append({"label": escape_text(name), "values": values, "tickvals": sorted(set(values))})
        else:
            labels = sorted({str(v) for v in values})
            index = {label: i for i, label in enumerate(labels)}
            dimensions.append(
                {"label": escape_text(name), "values": [index[str(v)] for v in values],
                 "tickvals": list(index.values()), "ticktext": [escape_text(label) for label in labels]}
            )  # fmt: skip
    speedups = [round(t["speedups"][concurrency], 4) for t in measured]
    dimensions.append({"label": "speedup", "values": speedups})
    spread = max(abs(s - 1) for s in speedups) or 0.01
    return {
        "data": [
            {
                "type": "parcoords",
                "line": {
                    "color": speedups,
                    "colorscale": _COLORSCALE,
                    "cmin": 1 - spread,
                    "cmax": 1 + spread,
                    "showscale": True,
                    "colorbar": {"title": {"text": "speedup"}},
                },
                "dimensions": dimensions,
            }
        ],
        "layout": {
            "title": {"text": f"Search space at concurrency {concurrency} (each line a measured config)"},
            "height": 360,
            "margin": {"l": 60, "r": 40, "t": 70, "b": 30},
        },
    }
