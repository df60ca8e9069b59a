import json
import math
from typing import Any

import pytest

from experiments.analysis import FASTER, INCONCLUSIVE, ComparisonRow
from experiments.charts.comparison import NO_ERROR_BAR, accept_length_figure, speedup_figure, throughput_figure


def _roundtrip(figure: dict[str, Any]) -> dict[str, Any]:
    # allow_nan=False: a NaN float would pass json.dumps by default but break JSON.parse in the browser.
    return json.loads(json.dumps(figure, allow_nan=False))


def _traces(figure: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {trace["name"]: trace for trace in figure["data"]}


def _row(candidate: str, concurrency: int, speedup: float, ci: tuple[float, float] | None) -> ComparisonRow:
    low, high = ci if ci else (None, None)
    verdict = FASTER if ci and ci[0] > 1 else INCONCLUSIVE
    return ComparisonRow(candidate, concurrency, 80.0, 80.0 * speedup, speedup, low, high, verdict, 5, 5, None)


def test_it_draws_one_throughput_line_per_config_baseline_first() -> None:
    figure = _roundtrip(
        throughput_figure(
            {
                "eagle3-2step": [(4, 150.0, 145.0, 156.0), (1, 94.0, 92.0, 95.0)],
                "baseline": [(1, 83.0, 82.0, 84.0), (4, 140.0, 138.0, 141.0)],
                "eagle3-3step": [(1, 60.0, None, None)],
            },
            baseline="baseline",
        )
    )
    lines = [trace for trace in figure["data"] if "fill" not in trace]
    assert [trace["name"] for trace in lines] == ["baseline", "eagle3-2step", "eagle3-3step"]
    base, two_step, three_step = lines
    assert base["line"]["dash"] == "dash"
    assert two_step["line"]["dash"] == "solid"
    assert two_step["x"] == [1, 4]  # sorted by concurrency
    assert two_step["y"] == [94.0, 150.0]
    assert two_step["line"]["color"] != three_step["line"]["color"] != base["line"]["color"]

    layout = figure["layout"]
    assert layout["title"]["text"].startswith("Output throughput vs concurrency")
    assert "template" not in layout  # ~8 KB per figure; the page styles what it needs
    assert layout["xaxis"]["title"]["text"] == "Concurrency"
    assert layout["xaxis"]["type"] == "log"
    assert layout["xaxis"]["tickvals"] == [1, 4]
    assert layout["xaxis"]["ticktext"] == ["1", "4"]
    assert layout["yaxis"]["title"]["text"] == "Output throughput (tok/s)"


def test_it_fills_a_band_between_the_interval_bounds_in_the_line_colour() -> None:
    figure = _roundtrip(
        throughput_figure(
            {
                "base": [(1, 83.0, 82.0, 84.0), (2, 120.0, None, None), (4, 140.0, 138.0, 141.0)],
                "one": [(1, 9.0, None, None)],
            },
            baseline="base",
        )
    )
    traces = _traces(figure)
    band = traces["base 95% CI"]
    # A closed polygon over the points that have an interval: upper bounds out, lower bounds back.
    assert band["x"] == [1, 4, 4, 1]
    assert band["y"] == [84.0, 141.0, 138.0, 82.0]
    assert band["fill"] == "toself"
    assert band["showlegend"] is False and band["legendgroup"] == "base"
    assert band["fillcolor"] == "rgba(85,85,85,0.18)"  # BASELINE_COLOR, translucent
    assert "one 95% CI" not in traces  # no interval anywhere, no band


def test_it_draws_candidates_without_a_baseline_series() -> None:
    figure = _roundtrip(throughput_figure({"eagle": [(1, 94.0, None, None)]}, baseline="baseline"))
    (trace,) = figure["data"]  # no interval: no band
    assert trace["name"] == "eagle"
    assert trace["line"]["dash"] == "solid"


def test_it_draws_speedup_per_candidate_with_intervals() -> None:
    rows = [
        _row("eagle3-2step", 1, 1.13, (1.10, 1.16)),
        _row("eagle3-3step", 1, 0.72, None),
        _row("eagle3-2step", 8, 0.95, (0.90, 1.01)),
    ]
    figure = _roundtrip(speedup_figure(rows))
    traces = _traces(figure)
    assert list(traces) == ["eagle3-2step", "eagle3-3step"]

    two_step = traces["eagle3-2step"]
    assert two_step["x"] == [1, 8]
    assert two_step["y"] == [1.13, 0.95]
    assert two_step["error_y"]["array"] == pytest.approx([0.03, 0.06])
    assert two_step["error_y"]["arrayminus"] == pytest.approx([0.03, 0.05])
    assert two_step["marker"]["symbol"] == ["circle", "circle-open"]  # inconclusive drawn hollow
    assert traces["eagle3-3step"]["error_y"]["visible"] is False

    (line,) = figure["layout"]["shapes"]
    assert (line["type"], line["y0"], line["y1"]) == ("line", 1.0, 1.0)
    assert (line["x0"], line["x1"]) == (0, 1)
    assert line["xref"].endswith("domain")  # spans the plot whatever the data range
    assert figure["layout"]["title"]["text"].startswith("Speedup vs baseline")
    assert figure["layout"]["xaxis"]["tickvals"] == [1, 8]


def test_it_matches_candidate_colours_across_figures() -> None:
    throughput = throughput_figure(
        {"baseline": [(1, 83.0, None, None)], "a": [(1, 90.0, None, None)], "b": [(1, 70.0, None, None)]},
        baseline="baseline",
    )
    speedup = speedup_figure([_row("a", 1, 1.08, None), _row("b", 1, 0.84, None)])
    for name in ("a", "b"):
        assert _traces(throughput)[name]["line"]["color"] == _traces(speedup)[name]["line"]["color"]


def test_it_leaves_out_error_bars_for_points_without_bounds() -> None:
    rows = [_row("a", 1, 1.1, None), _row("a", 2, 1.2, (1.1, 1.25))]
    error = _traces(_roundtrip(speedup_figure(rows)))["a"]["error_y"]
    assert error["array"] == [NO_ERROR_BAR, pytest.approx(0.05)]
    assert error["arrayminus"] == [NO_ERROR_BAR, pytest.approx(0.1)]
    # JavaScript's Number() must turn it into NaN (as Python's float does), or plotly.js draws a bar.
    assert isinstance(NO_ERROR_BAR, str)
    assert math.isnan(float(NO_ERROR_BAR))


def test_it_marks_break_even_only_where_a_level_is_given() -> None:
    rows = [_row("a", 1, 1.1, None), _row("a", 8, 0.9, None), _row("b", 1, 1.2, None)]
    traces = _traces(_roundtrip(speedup_figure(rows, break_even={"a": 8, "b": None})))
    assert list(traces) == ["a", "a: break-even at 8", "b"]
    assert (traces["a: break-even at 8"]["x"], traces["a: break-even at 8"]["y"]) == ([8], [0.9])


def test_it_escapes_config_names_in_hover_labels() -> None:
    figure = _roundtrip(accept_length_figure({"<b>50%{x}": [(1, 2.0, None, None)]}))
    (trace,) = figure["data"]
    assert trace["name"] == "&lt;b&gt;50&#37;{x}"  # the legend is HTML too (test_hardening.py covers every figure)
    assert "&lt;b&gt;50&#37;{x}" in trace["hovertemplate"]


def test_it_draws_an_empty_speedup_figure() -> None:
    figure = _roundtrip(speedup_figure([]))
    assert figure["data"] == []
    assert figure["layout"]["shapes"][0]["y0"] == 1.0


def _entries(values: list[float]) -> list:
    from experiments.charts.history import HistoryEntry

    return [
        HistoryEntry(f"2026-11-{day:02d}T02:00:00+00:00", f"run {day}", value, f"/runs/{day}/")
        for day, value in enumerate(values, start=1)
    ]


def test_it_draws_a_history_on_a_time_axis_one_small_multiple_per_concurrency():
    from experiments.charts.history import history_figure

    figure = history_figure(
        {1: _entries([88.8, 88.9, 82.2]), 4: _entries([300.0])},
        [(1, 2, "regression", "-7.4%: moved"), (4, 5, "improvement", "out of range is ignored")],
        title="baseline on gpu-1",
        pinned=("2026-11-02T09:00:00+00:00", "pinned as the baseline by <b>ann</b>"),
    )

    c1, regression, c4 = figure["data"]
    assert (c1["name"], regression["name"], c4["name"]) == ("c=1", "regression", "c=4")
    assert c1["x"][0] == "2026-11-01T02:00:00+00:00" and figure["layout"]["xaxis"]["type"] == "date"
    assert (c1["yaxis"], c4["yaxis"]) == ("y", "y2")  # each level its own chart, one shared time axis
    assert figure["layout"]["yaxis"]["domain"][0] > figure["layout"]["yaxis2"]["domain"][1]
    assert c1["customdata"] == ["/runs/1/", "/runs/2/", "/runs/3/"]  # a click opens the run
    assert (regression["x"], regression["y"], regression["customdata"]) == (
        ["2026-11-03T02:00:00+00:00"],
        [82.2],
        ["/runs/3/"],
    )  # a mark outside its series is dropped, not drawn anywhere
    assert figure["layout"]["shapes"][0]["x0"] == "2026-11-02T09:00:00+00:00"
    assert figure["layout"]["annotations"][0]["text"] == "pinned as the baseline by &lt;b&gt;ann&lt;/b&gt;"
    json.dumps(figure, allow_nan=False)
