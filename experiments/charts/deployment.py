"""The frontier figure: output tok/s per GPU (y) against interactivity, tok/s per user (x), one curve per config
through its measured concurrencies, each point with its 95% intervals both ways; the frontier's best points ringed
and labelled with their config. Pure, a JSON-ready Plotly dict like charts/comparison.py's."""

from collections.abc import Mapping, Sequence
from typing import Any

from experiments.analysis.deployment import CurvePoint, FrontierPoint

from .comparison import BASELINE_COLOR, _axis, _candidate_color, _error_bars, _layout, escape_text


def frontier_figure(
    curves: Mapping[str, Sequence[CurvePoint]],
    frontier: Sequence[FrontierPoint],
    *,
    baseline: str,
    colors: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    others = [name for name in curves if name != baseline]
    colors = colors or {}
    traces: list[dict[str, Any]] = []
    for position, name in enumerate(([baseline] if baseline in curves else []) + others):
        points = sorted(curves[name], key=lambda p: p.interactivity)
        color = colors.get(name) or (BASELINE_COLOR if name == baseline else _candidate_color(position))
        label = escape_text(name)
        traces.append(
            {
                "type": "scatter",
                "name": label,
                "legendgroup": name,
                "x": [p.interactivity for p in points],
                "y": [p.tok_s_per_gpu for p in points],
                "text": [f"c={p.concurrency}" for p in points],
                "mode": "lines+markers+text",
                "textposition": "top center",
                "line": {"color": color, "dash": "dash" if name == baseline else "solid"},
                "error_y": _error_bars([(p.tok_s_per_gpu, p.tok_s_per_gpu_low, p.tok_s_per_gpu_high) for p in points]),
                "error_x": _error_bars([(p.interactivity, p.interactivity_low, p.interactivity_high) for p in points]),
                "hovertemplate": f"{label} at %{{text}}<br>%{{x:.1f}} tok/s per user, %{{y:.1f}} tok/s per GPU"
                "<extra></extra>",
            }
        )
    if frontier:
        traces.append(
            {
                "type": "scatter",
                "name": "best (frontier)",
                "x": [f.point.interactivity for f in frontier],
                "y": [f.point.tok_s_per_gpu for f in frontier],
                "text": [escape_text(f.config) for f in frontier],
                "mode": "markers",
                "marker": {"symbol": "circle-open", "size": 16, "line": {"width": 2}, "color": "#111827"},
                "hovertemplate": "best here: %{text}<extra></extra>",
            }
        )
    return {
        "data": traces,
        "layout": _layout(
            "Tokens per GPU against the pace each user sees (mean, 95% CI)",
            xaxis=_axis("Interactivity (tok/s per user, 1000 / TPOT)", rangemode="tozero"),
            yaxis=_axis("Output throughput per GPU (tok/s)", rangemode="tozero"),
        ),
    }
