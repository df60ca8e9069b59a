"""The draft's report card figure: served accept length against training step, one colour per served shape
(algorithm, steps, topk, draft tokens), each point with its 95% interval, beside the training figure on the same
definition at that depth (dashed, open marks). Pure, a JSON-ready Plotly dict like charts/comparison.py's."""

from __future__ import annotations

from typing import Any

from experiments.analysis.draft_report import DraftReport

from .comparison import _axis, _candidate_color, _error_bars, _layout, escape_text


def served_against_step_figure(report: DraftReport) -> dict[str, Any] | None:
    """None until a checkpoint matched to a training step has a served figure (drafts outside any training
    directory have no step to plot)."""
    series: dict[str, list[tuple[int, Any]]] = {}
    for card in report.checkpoints:
        if card.training is None:
            continue
        for candidate in card.candidates:
            if candidate.served is not None:
                series.setdefault(candidate.candidate.shape, []).append((card.training.step, candidate))
    if not series:
        return None
    traces: list[dict[str, Any]] = []
    for position, (shape, points) in enumerate(sorted(series.items())):
        points.sort(key=lambda p: p[0])
        color = _candidate_color(position)
        name = escape_text(shape)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"served · {name}",
                "legendgroup": name,
                "x": [step for step, _ in points],
                "y": [c.served for _, c in points],
                "error_y": _error_bars([(c.served, c.served_low, c.served_high) for _, c in points]),
                "customdata": [[escape_text(c.candidate.name)] for _, c in points],
                "line": {"color": color},
                "hovertemplate": "%{customdata[0]}<br>step %{x}: served accept length %{y:.2f}<extra></extra>",
            }
        )
        trained = [(step, c.training) for step, c in points if c.training is not None]
        if trained:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": f"training · {name}",
                    "legendgroup": name,
                    "x": [step for step, _ in trained],
                    "y": [value for _, value in trained],
                    "line": {"color": color, "dash": "dash", "width": 1},
                    "marker": {"symbol": "circle-open", "size": 9, "color": color},
                    "hovertemplate": "step %{x}: training accept length %{y:.2f}<extra></extra>",
                }
            )
    layout = _layout(
        "Served accept length against training step",
        xaxis=_axis("Training step"),
        yaxis=_axis("Accept length (per request, bonus token counted)", rangemode="tozero"),
    )
    legend = {"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0}
    return {"data": traces, "layout": {**layout, "legend": legend, "margin": {"l": 60, "r": 20, "t": 80, "b": 50}}}
