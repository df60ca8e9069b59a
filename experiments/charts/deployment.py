"""The frontier figure: output tok/s per GPU (y) against interactivity, tok/s per user (x), one curve per config
through its measured concurrencies, each point with its 95% intervals both ways; the frontier's best points ringed
and labelled with their config. Pure, a JSON-ready Plotly dict like charts/comparison.py's."""

from collections.abc import Mapping, Sequence
from typing import Any

from experiments.analysis.deployment import CurvePoint, FrontierPoint
from experiments.analysis.gain_trend import GainTrend

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


def gain_trend_figure(trend: GainTrend, *, colors: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Each candidate's gain per GPU at the trend's fixed pace, launch by launch (95% CI where its launch had
    passes enough), against the line at 1 where it serves what the baseline does."""
    colors = colors or {}
    traces: list[dict[str, Any]] = []
    for position, (name, launches) in enumerate(trend.candidates.items()):
        read = [entry for entry in launches if entry.gain is not None]
        label = escape_text(name)
        traces.append(
            {
                "type": "scatter",
                "name": label,
                "x": [entry.launch + 1 for entry in read],
                "y": [entry.gain.ratio for entry in read if entry.gain],
                "text": [entry.ended_at.strftime("%Y-%m-%d %H:%M") if entry.ended_at else "" for entry in read],
                "mode": "lines+markers",
                "line": {"color": colors.get(name) or _candidate_color(position + 1)},
                "error_y": _error_bars([(e.gain.ratio, e.gain.low, e.gain.high) for e in read if e.gain]),
                "hovertemplate": f"{label}, launch %{{x}} (%{{text}} UTC)<br>%{{y:.3f}}x the baseline's tokens per "
                "GPU<extra></extra>",
            }
        )
    return {
        "data": traces,
        "layout": _layout(
            f"Gain per GPU at {trend.target:.0f} tok/s per user, launch by launch (95% CI)",
            xaxis=_axis("Launch", tickmode="linear", dtick=1, rangemode="tozero"),
            yaxis=_axis("Candidate / baseline tok/s per GPU"),
            shapes=[
                {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                 "line": {"color": BASELINE_COLOR, "dash": "dash", "width": 1}}
            ],
        ),
    }  # fmt: skip
