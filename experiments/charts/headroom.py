"""The acceptance headroom figure: output throughput against accept length, one colour per concurrency. Pure.

Per concurrency: the simulated points joined by a line, the fitted line of the break-even model (dotted), the
baseline's throughput (dashed, flat: the baseline has no draft), the real draft at its measured accept length (a
star) and the break-even mark where the fitted line meets the baseline (a diamond on the baseline's line).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from experiments.analysis.headroom import Level

from .comparison import BASELINE_COLOR, _axis, _candidate_color, _layout


def headroom_figure(levels: Sequence[Level], lengths: Sequence[float]) -> dict[str, Any]:
    reals = [level.real.accept_length for level in levels if level.real is not None]
    marks = [level.break_even for level in levels if level.break_even is not None and 1 <= level.break_even]
    low = min([1.0, *lengths, *reals, *marks])
    high = max([*lengths, *reals, *[m for m in marks if m <= max(lengths, default=1) + 1]], default=low + 1)
    traces: list[dict[str, Any]] = []
    for position, level in enumerate(levels):
        color = _candidate_color(position)
        c = level.concurrency
        group = f"c={c}"
        traces.append(
            {
                "type": "scatter",
                "name": f"c={c}",
                "legendgroup": group,
                "mode": "lines+markers",
                "x": [p.accept_length for p in level.simulated],
                "y": [p.tok_s for p in level.simulated],
                "customdata": [[f"{p.speedup:.2f}x{p.interval}"] for p in level.simulated],
                "line": {"color": color},
                "hovertemplate": f"c={c}, accept length %{{x}}: %{{y:.1f}} tok/s, %{{customdata[0]}}<extra></extra>",
            }
        )
        if level.slope is not None:
            traces.append(
                {
                    "type": "scatter",
                    "name": f"c={c} fitted line",
                    "legendgroup": group,
                    "showlegend": False,
                    "mode": "lines",
                    "x": [low, high],
                    "y": [level.tok_s_at(low), level.tok_s_at(high)],
                    "line": {"color": color, "dash": "dot", "width": 1},
                    "hoverinfo": "skip",
                }
            )
        traces.append(
            {
                "type": "scatter",
                "name": f"c={c} baseline",
                "legendgroup": group,
                "showlegend": False,
                "mode": "lines",
                "x": [low, high],
                "y": [level.baseline_tok_s, level.baseline_tok_s],
                "line": {"color": BASELINE_COLOR, "dash": "dash", "width": 1},
                "hovertemplate": f"c={c} baseline: %{{y:.1f}} tok/s<extra></extra>",
            }
        )
        if level.real is not None:
            traces.append(
                {
                    "type": "scatter",
                    "name": f"c={c} real draft",
                    "legendgroup": group,
                    "showlegend": False,
                    "mode": "markers",
                    "x": [level.real.accept_length],
                    "y": [level.real.tok_s],
                    "marker": {"symbol": "star", "size": 14, "color": color, "line": {"width": 1, "color": "#000"}},
                    "hovertemplate": (
                        f"c={c} real draft: accept length %{{x:.2f}}, %{{y:.1f}} tok/s, "
                        f"{level.real.speedup:.2f}x{level.real.interval}<extra></extra>"
                    ),
                }
            )
        if level.break_even is not None:
            traces.append(
                {
                    "type": "scatter",
                    "name": f"c={c} break-even",
                    "legendgroup": group,
                    "showlegend": False,
                    "mode": "markers",
                    "x": [level.break_even],
                    "y": [level.baseline_tok_s],
                    "marker": {"symbol": "diamond-open", "size": 13, "color": color, "line": {"width": 2}},
                    "hovertemplate": f"c={c} breaks even at accept length %{{x:.2f}}<extra></extra>",
                }
            )
    # Concurrencies far apart in throughput share a log axis, so the lowest one's curve is not flattened.
    baselines = [level.baseline_tok_s for level in levels]
    spread = bool(baselines) and max(baselines) > 4 * min(baselines)
    yaxis = _axis("Output tok/s", type="log") if spread else _axis("Output tok/s", rangemode="tozero")
    layout = _layout("Throughput against accept length", xaxis=_axis("Accept length"), yaxis=yaxis)
    # One legend entry per concurrency (a click hides its whole group); the page's caption says what the marks are.
    legend = {"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0}
    return {"data": traces, "layout": {**layout, "legend": legend, "margin": {"l": 60, "r": 20, "t": 80, "b": 50}}}
