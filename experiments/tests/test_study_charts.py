"""The search space coloured by result: one parallel-coordinates line per measured config, drawn in SVG."""

from experiments.charts.study import space_figure


def _annotations(figure: dict, axis: int) -> dict[str, float]:
    return {a["text"]: a["y"] for a in figure["layout"]["annotations"] if a["x"] == axis}


def test_it_draws_each_measured_config_through_its_values_coloured_by_speedup() -> None:
    trials = [
        {"config": "s1", "values": {"steps": 1, "topk": 1, "NCCL_PROTO": "LL"}, "speedups": {1: 1.1, 8: 0.9}},
        {"config": "s4", "values": {"steps": 4, "topk": 4, "NCCL_PROTO": "Simple"}, "speedups": {1: 1.2}},
        {"config": "s2", "values": {"steps": 2, "topk": 1, "NCCL_PROTO": "LL"}, "speedups": {1: 0.8}},
        {"config": "s3", "values": {"steps": 3, "topk": 1, "NCCL_PROTO": "LL"}, "speedups": {1: None}},
    ]

    figure = space_figure(trials, 1)

    assert figure is not None
    # No WebGL trace (parcoords, *gl): their drawing evaluates strings, which the pages' policy refuses.
    assert {trace["type"] for trace in figure["data"]} == {"scatter"}
    *lines, scale = figure["data"]
    assert [line["x"] for line in lines] == [[0, 1, 2, 3]] * 3  # steps, topk, NCCL_PROTO, speedup
    assert figure["layout"]["xaxis"]["ticktext"] == ["steps", "topk", "NCCL_PROTO", "speedup"]
    # Numbers sit as far apart as they are; texts evenly, alphabetically; the speedup centred on 1.0.
    assert [line["y"][0] for line in lines] == [0.0, 1.0, 0.3333]
    assert [line["y"][2] for line in lines] == [0.0, 1.0, 0.0]
    assert [line["y"][3] for line in lines] == [0.75, 1.0, 0.0]
    assert _annotations(figure, 0) == {"1": 0.0, "2": 0.3333, "4": 1.0}
    assert _annotations(figure, 3) == {"0.800×": 0.0, "1.000×": 0.5, "1.200×": 1.0}
    # Green above the baseline, red below; the scale's bar from the same ends.
    assert [line["line"]["color"] for line in lines][1:] == ["#027a48", "#b42318"]
    assert scale["marker"]["cmin"] == 0.8 and scale["marker"]["cmax"] == 1.2 and scale["marker"]["showscale"]
    assert "s4<br>steps 4, topk 4, NCCL_PROTO Simple<br>speedup 1.200×" in lines[1]["hovertemplate"]
    assert space_figure(trials, 8) is None  # one config measured there: nothing to compare


def test_it_draws_what_users_typed_as_text_not_markup() -> None:
    # Flag and environment values are typed by users and shown to everyone who opens the study; plotly.js renders
    # labels as a subset of HTML and `%{` as a template.
    trials = [
        {"config": "<b>x</b>", "values": {"--x-<b>": "<img src=x onerror=alert(1)>"}, "speedups": {1: 1.1}},
        {"config": "%{meta}", "values": {"--x-<b>": "%{meta}"}, "speedups": {1: 0.9}},
    ]

    figure = space_figure(trials, 1)
    assert figure is not None

    assert figure["layout"]["xaxis"]["ticktext"][0] == "--x-&lt;b&gt;"
    assert set(_annotations(figure, 0)) == {"&#37;{meta}", "&lt;img src=x onerror=alert(1)&gt;"}
    first, second, _ = figure["data"]
    assert first["hovertemplate"].startswith("&lt;b&gt;x&lt;/b&gt;<br>--x-&lt;b&gt; &lt;img src=x")
    assert second["hovertemplate"].startswith("&#37;{meta}<br>--x-&lt;b&gt; &#37;{meta}<br>")
