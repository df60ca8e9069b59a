"""The search space coloured by result: one parallel-coordinates line per measured config."""

from experiments.charts.study import space_figure


def test_it_draws_each_measured_config_through_its_values_coloured_by_speedup() -> None:
    trials = [
        {"values": {"steps": 1, "topk": 1, "NCCL_PROTO": "LL"}, "speedups": {1: 1.1, 8: 0.9}},
        {"values": {"steps": 2, "topk": 4, "NCCL_PROTO": "Simple"}, "speedups": {1: 1.2}},
        {"values": {"steps": 3, "topk": 1, "NCCL_PROTO": "LL"}, "speedups": {1: None}},
    ]

    figure = space_figure(trials, 1)

    assert figure is not None
    trace = figure["data"][0]
    assert trace["type"] == "parcoords" and trace["line"]["color"] == [1.1, 1.2]
    labels = {d["label"]: d for d in trace["dimensions"]}
    assert labels["steps"]["values"] == [1, 2]
    assert labels["NCCL_PROTO"]["ticktext"] == ["LL", "Simple"] and labels["NCCL_PROTO"]["values"] == [0, 1]
    assert trace["line"]["cmin"] < 1 < trace["line"]["cmax"]
    assert space_figure(trials, 8) is None  # one config measured there: nothing to compare


def test_it_draws_what_users_typed_as_text_not_markup() -> None:
    # Flag and environment values are typed by users and shown to everyone who opens the study; plotly.js renders
    # labels as a subset of HTML and `%{` as a template.
    trials = [
        {"values": {"--x-<b>": "<img src=x onerror=alert(1)>"}, "speedups": {1: 1.1}},
        {"values": {"--x-<b>": "%{meta}"}, "speedups": {1: 0.9}},
    ]

    figure = space_figure(trials, 1)
    assert figure is not None
    (dimension, _) = figure["data"][0]["dimensions"]

    assert dimension["label"] == "--x-&lt;b&gt;"
    assert dimension["ticktext"] == ["&#37;{meta}", "&lt;img src=x onerror=alert(1)&gt;"]
