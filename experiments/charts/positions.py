"""The per-position acceptance figure: for draft position 1, 2, 3 ... the share of verify steps that accepted that
draft, grouped bars, one per config and concurrency (a config's colour, lighter at higher concurrency). Pure, a
JSON-ready Plotly dict like charts/comparison.py's."""

from collections.abc import Mapping, Sequence
from typing import Any

from .comparison import _axis, _candidate_color, _layout, _translucent, escape_text


def position_figure(
    rows: Sequence[tuple[str, int, Sequence[float]]], *, colors: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`rows`: (config, concurrency, rates) in the order to draw, rates[j - 1] the share (0-1) of verify steps that
    accepted draft j."""
    colors = colors or {}
    configs = list(dict.fromkeys(config for config, _, _ in rows))
    levels: dict[str, list[int]] = {config: [] for config in configs}
    for config, level, _ in rows:
        levels[config].append(level)
    positions = max((len(rates) for _, _, rates in rows), default=0)
    traces = []
    for config, level, rates in rows:
        color = colors.get(config) or _candidate_color(configs.index(config))
        # Higher concurrency, lighter bar: the legend's order tells the levels apart, the colour the config.
        shade = 1.0 - 0.5 * levels[config].index(level) / max(len(levels[config]) - 1, 1)
        name = f"{escape_text(config)} · c={level}"
        traces.append(
            {
                "type": "bar",
                "name": name,
                "legendgroup": config,
                "x": [f"draft {j}" for j in range(1, len(rates) + 1)],
                "y": [round(rate * 100, 2) for rate in rates],
                "marker": {"color": _translucent(color, shade) if shade < 1 else color},
                "hovertemplate": f"{name}<br>%{{x}} accepted in %{{y:.1f}}% of verify steps<extra></extra>",
            }
        )
    layout = _layout(
        "Acceptance per draft position (share of verify steps that accepted it)",
        xaxis=_axis(
            "Draft position", categoryorder="array", categoryarray=[f"draft {j}" for j in range(1, positions + 1)]
        ),
        yaxis=_axis("Verify steps (%)", range=[0, 100]),
    )
    return {"data": traces, "layout": {**layout, "barmode": "group"}}
