"""Plotly figures for the comparison page, as plain JSON-ready dicts.

Pure: data in, figure dict out. The page hands the dict to `Plotly.newPlot` through Django's `json_script`, so
every value must survive the standard `json` module.

The dicts are written out by hand rather than built with `plotly.graph_objects`: validating a Figure costs about a
millisecond per trace, and a 50-config experiment draws several hundred traces per page view. For the same
reason no Plotly template is embedded (`plotly_white` adds ~8 KB of JSON to every figure); `_layout` sets the few
styles the page needs.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from plotly.colors import qualitative

from experiments.analysis import INCONCLUSIVE, ComparisonRow, Point

BASELINE_COLOR = "#555555"
# Candidates take colours by position, so the same candidate looks the same in every figure when the caller
# lists candidates in the same order (or passes `colors` from `config_colors`).
CANDIDATE_COLORS = qualitative.Plotly
# plotly.js turns a JSON null in an error array into 0 and draws a zero-length bar, which reads as "no
# uncertainty"; a non-numeric entry becomes NaN there and draws no bar, which is the truth for a point
# without an interval.
NO_ERROR_BAR = "NaN"
GRID_COLOR = "#e5e9f0"

# The latency figure's panels: (metric prefix in a latency row, panel title).
LATENCY_METRICS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("itl_ms", "ITL (ms)"))


def config_colors(baseline: str, candidates: Sequence[str]) -> dict[str, str]:
    """One colour per config: grey for the baseline, the qualitative palette for candidates by position."""
    colors = {name: _candidate_color(position) for position, name in enumerate(candidates)}
    colors[baseline] = BASELINE_COLOR
    return colors


def throughput_figure(
    series: Mapping[str, Sequence[Point]], *, baseline: str, colors: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Output throughput against concurrency: per config a line through the means and a filled 95% band.

    `series` maps a config name to (concurrency, mean tok/s, low, high) points. The band joins the points that
    have both bounds. The baseline, if present, is drawn first, dashed and grey; the others follow in mapping
    order.
    """
    others = [name for name in series if name != baseline]
    colors = colors or config_colors(baseline, others)
    traces: list[dict[str, Any]] = []
    for name in ([baseline] if baseline in series else []) + others:
        points = sorted(series[name], key=lambda point: point[0])
        color = colors.get(name) or _candidate_color(others.index(name))
        bounded = [point for point in points if point[2] is not None and point[3] is not None]
        if bounded:
            # One closed polygon: along the upper bounds, then back along the lower ones.
            traces.append(
                {
                    "type": "scatter",
                    "name": f"{escape_text(name)} 95% CI",
                    "legendgroup": name,
                    "showlegend": False,
                    "x": [p[0] for p in bounded] + [p[0] for p in reversed(bounded)],
                    "y": [p[3] for p in bounded] + [p[2] for p in reversed(bounded)],
                    "mode": "lines",
                    "fill": "toself",
                    "fillcolor": _translucent(color, 0.18),
                    "line": {"width": 0, "color": color},
                    "hoverinfo": "skip",
                }
            )
        traces.append(
            {
                "type": "scatter",
                "name": escape_text(name),
                "legendgroup": name,
                "x": [p[0] for p in points],
                "y": [p[1] for p in points],
                "customdata": [[_fmt(p[2]), _fmt(p[3])] for p in points],
                "mode": "lines+markers",
                "line": {"color": color, "dash": "dash" if name == baseline else "solid"},
                "hovertemplate": f"{escape_text(name)}<br>concurrency %{{x}}: %{{y:.1f}} tok/s"
                " (95% CI %{customdata[0]} to %{customdata[1]})<extra></extra>",
            }
        )
    levels = sorted({point[0] for points in series.values() for point in points})
    return {
        "data": traces,
        "layout": _layout(
            "Output throughput vs concurrency (mean, 95% CI band)",
            xaxis=_concurrency_axis(levels),
            yaxis=_axis("Output throughput (tok/s)", rangemode="tozero"),
        ),
    }


def speedup_figure(
    rows: Sequence[ComparisonRow],
    *,
    break_even: Mapping[str, int | None] | None = None,
    colors: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Speedup against concurrency, one line per candidate, with the 95% interval as error bars.

    A dashed line marks 1.0 (the baseline); inconclusive points are drawn hollow so a reader does not take
    them for results. `break_even` maps a candidate to the concurrency where it stops paying
    (`analysis.break_even_concurrency`); each such level gets a marked point of its own, in the legend.
    """
    candidates = list(dict.fromkeys(row.candidate for row in rows))
    colors = colors or {name: _candidate_color(position) for position, name in enumerate(candidates)}
    traces: list[dict[str, Any]] = []
    for position, candidate in enumerate(candidates):
        own = sorted((row for row in rows if row.candidate == candidate), key=lambda row: row.concurrency)
        color = colors.get(candidate) or _candidate_color(position)
        traces.append(
            {
                "type": "scatter",
                "name": escape_text(candidate),
                "legendgroup": candidate,
                "x": [row.concurrency for row in own],
                "y": [row.speedup for row in own],
                "mode": "lines+markers",
                "line": {"color": color},
                "marker": {
                    "size": 9,
                    "symbol": ["circle-open" if row.verdict == INCONCLUSIVE else "circle" for row in own],
                },
                "error_y": _error_bars([(row.speedup, row.ci_low, row.ci_high) for row in own]),
                "customdata": [[row.verdict] for row in own],
                "hovertemplate": f"{escape_text(candidate)}<br>concurrency %{{x}}: %{{y:.3f}}x, %{{customdata[0]}}"
                "<extra></extra>",
            }
        )
        level = (break_even or {}).get(candidate)
        at_level = [row for row in own if row.concurrency == level]
        if at_level:
            traces.append(
                {
                    "type": "scatter",
                    "name": f"{escape_text(candidate)}: break-even at {level}",
                    "legendgroup": candidate,
                    "x": [level],
                    "y": [at_level[0].speedup],
                    "mode": "markers",
                    "marker": {"symbol": "x-thin-open", "size": 18, "color": color, "line": {"width": 3}},
                    "hovertemplate": f"{escape_text(candidate)} stops paying at concurrency %{{x}}<extra></extra>",
                }
            )
    levels = sorted({row.concurrency for row in rows})
    layout = _layout(
        "Speedup vs baseline (95% CI; x marks the break-even concurrency)",
        xaxis=_concurrency_axis(levels),
        yaxis=_axis("Speedup (candidate / baseline)"),
    )
    layout["shapes"] = [
        {
            "type": "line",
            "xref": "x domain",
            "yref": "y",
            "x0": 0,
            "x1": 1,
            "y0": 1.0,
            "y1": 1.0,
            "line": {"color": BASELINE_COLOR, "dash": "dash", "width": 1},
        }
    ]
    return {"data": traces, "layout": layout}


def accept_length_figure(
    series: Mapping[str, Sequence[Point]], *, colors: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Mean accept length against concurrency per speculative config, with 95% error bars."""
    colors = colors or {name: _candidate_color(position) for position, name in enumerate(series)}
    traces = []
    for position, (name, points) in enumerate(series.items()):
        points = sorted(points, key=lambda point: point[0])
        traces.append(
            {
                "type": "scatter",
                "name": escape_text(name),
                "x": [p[0] for p in points],
                "y": [p[1] for p in points],
                "mode": "lines+markers",
                "line": {"color": colors.get(name) or _candidate_color(position)},
                "error_y": _error_bars([(mean, low, high) for _, mean, low, high in points]),
                "hovertemplate": f"{escape_text(name)}<br>concurrency %{{x}}: accept length %{{y:.2f}}<extra></extra>",
            }
        )
    levels = sorted({point[0] for points in series.values() for point in points})
    return {
        "data": traces,
        "layout": _layout(
            "Accept length vs concurrency (mean, 95% CI)",
            xaxis=_concurrency_axis(levels),
            yaxis=_axis("Accept length (tokens per verify)", rangemode="tozero"),
        ),
    }


def latency_figure(
    latency: Sequence[Mapping[str, Any]], *, baseline: str, colors: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """TTFT, TPOT and ITL against concurrency, three panels side by side, one colour per config.

    `latency` holds rows with `config`, `concurrency` and `mean_<metric>` / `p99_<metric>` for each metric of
    LATENCY_METRICS (None where not measured). The mean is a solid line, the p99 a thin dotted line of the same
    colour. The legend toggles a config in all panels at once.
    """
    names = list(dict.fromkeys(row["config"] for row in latency))
    others = [name for name in names if name != baseline]
    colors = colors or config_colors(baseline, others)
    by_config: dict[str, list[Mapping[str, Any]]] = {name: [] for name in names}
    for row in latency:
        by_config[row["config"]].append(row)
    traces: list[dict[str, Any]] = []
    gap = 0.06
    width = (1 - gap * (len(LATENCY_METRICS) - 1)) / len(LATENCY_METRICS)
    layout = _layout("Latency vs concurrency (solid: mean, dotted: p99)")
    levels = sorted({row["concurrency"] for row in latency})
    for panel, (metric, title) in enumerate(LATENCY_METRICS):
        suffix = "" if panel == 0 else str(panel + 1)
        start = panel * (width + gap)
        layout[f"xaxis{suffix}"] = {
            **_concurrency_axis(levels),
            "domain": [start, start + width],
            "anchor": f"y{suffix}",
        }
        layout[f"yaxis{suffix}"] = {**_axis(title, rangemode="tozero"), "anchor": f"x{suffix}"}
        for name in ([baseline] if baseline in by_config else []) + others:
            rows = sorted(by_config[name], key=lambda row: row["concurrency"])
            color = colors.get(name) or BASELINE_COLOR
            for stat, line in (("mean", {"width": 2}), ("p99", {"width": 1, "dash": "dot"})):
                traces.append(
                    {
                        "type": "scatter",
                        "name": escape_text(name) if stat == "mean" else f"{escape_text(name)} p99",
                        "legendgroup": name,
                        "showlegend": panel == 0 and stat == "mean",
                        "xaxis": f"x{suffix}",
                        "yaxis": f"y{suffix}",
                        "x": [row["concurrency"] for row in rows],
                        "y": [row[f"{stat}_{metric}"] for row in rows],
                        "mode": "lines+markers" if stat == "mean" else "lines",
                        "opacity": 1.0 if stat == "mean" else 0.55,
                        "line": {"color": color, **line},
                        "hovertemplate": f"{escape_text(name)} {stat} {title}<br>concurrency %{{x}}: %{{y:.1f}}"
                        "<extra></extra>",
                    }
                )
    return {"data": traces, "layout": layout}


def _candidate_color(position: int) -> str:
    return CANDIDATE_COLORS[position % len(CANDIDATE_COLORS)]


def _translucent(color: str, alpha: float) -> str:
    """`#rrggbb` as an rgba() string with `alpha`; other colour forms are returned as they are."""
    if len(color) == 7 and color.startswith("#"):
        red, green, blue = (int(color[i : i + 2], 16) for i in (1, 3, 5))
        return f"rgba({red},{green},{blue},{alpha})"
    return color


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


REGRESSION_COLOR, IMPROVEMENT_COLOR, SUSPECTED_COLOR = "#c4320a", "#12805c", "#667085"


def escape_text(name: str) -> str:
    # Every user-chosen string (config, candidate, host and run names) passes here before it reaches a figure:
    # plotly.js renders legends, titles and hover labels as (a subset of) HTML, and `%{` would start a template
    # variable there (legend names too, through `meta`). The fixed texts around them are ours and stay as written.
    return name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("%", "&#37;")


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


def _layout(title: str, **axes: Any) -> dict[str, Any]:
    return {
        "title": {"text": title},
        "paper_bgcolor": "#fff",
        "plot_bgcolor": "#fff",
        "hovermode": "closest",
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        **axes,
    }


def _axis(title: str, **extra: Any) -> dict[str, Any]:
    return {"title": {"text": title}, "gridcolor": GRID_COLOR, "zerolinecolor": GRID_COLOR, **extra}


def _concurrency_axis(levels: Sequence[int]) -> dict[str, Any]:
    # Concurrency levels are usually powers of two: a log axis spaces them evenly, and ticks at exactly the
    # measured levels keep plotly from labelling values nobody ran.
    return _axis(
        "Concurrency",
        type="log",
        tickmode="array",
        tickvals=list(levels),
        ticktext=[str(level) for level in levels],
    )
