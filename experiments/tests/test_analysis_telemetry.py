"""Judging GPU telemetry: throttling while benchmarking, and runs at lower clocks than the ones they are compared
with."""

from __future__ import annotations

import json

from experiments.analysis.telemetry import GpuReading, comparison_warnings, summary
from experiments.charts.telemetry import telemetry_figure


def _sample(t: float, gpu: int = 0, sm: int = 1980, reasons: int = 0, used: int = 120000) -> GpuReading:
    return GpuReading(gpu, sm, 3201, 60, 450.0, 97, None, used, reasons, t=t)


def test_it_judges_only_the_samples_taken_while_a_cell_ran_on_the_runs_own_gpus():
    samples = [
        _sample(0, sm=1320, reasons=0x40),  # loading, before the cell: throttled, but not what was measured
        _sample(10),
        _sample(11, sm=1500, reasons=0x4),
        _sample(11, gpu=5, sm=405, reasons=0x1, used=0),  # a GPU the run does not use
        _sample(30),
    ]

    found = summary(samples, [(9.0, 12.0)])

    assert found["samples"] == 2 and found["throttled_samples"] == 1
    assert found["throttle_reasons"] == ["SW power cap"] and found["min_sm_mhz"] == 1500
    assert summary(samples, [])["throttle_reasons"] == ["SW power cap", "HW thermal slowdown"]  # no cell: all of it


def test_it_warns_of_throttled_runs_and_of_runs_at_lower_clocks_only():
    cool = summary([_sample(t) for t in range(5)], [])
    hot = summary([_sample(t, sm=1320, reasons=0x60) for t in range(5)], [])
    slow = summary([_sample(t, sm=1800) for t in range(5)], [])

    warnings = comparison_warnings({"Run 1 (a)": cool, "Run 2 (b)": hot, "Run 3 (c)": slow})

    assert warnings == [
        "Run 2 (b) was throttled during the run: SW thermal slowdown, HW thermal slowdown in 5 of 5 samples, "
        "SM clock down to 1320 MHz",
        "Run 2 (b) ran its GPUs at a median SM clock of 1320 MHz, below the 1980 MHz of Run 1 (a): it measured a "
        "slower machine than the runs it is compared with",
        "Run 3 (c) ran its GPUs at a median SM clock of 1800 MHz, below the 1980 MHz of Run 1 (a): it measured a "
        "slower machine than the runs it is compared with",
    ]
    assert comparison_warnings({"Run 1 (a)": cool, "Run 4 (d)": summary([_sample(1, sm=1950)], [])}) == []


def test_it_charts_the_runs_gpus_with_the_cells_shaded_and_throttled_samples_marked():
    samples = [_sample(100), _sample(101, sm=1320, reasons=0x60), _sample(100, gpu=7, sm=405, reasons=1, used=0)]

    figure = telemetry_figure(samples, [(99.5, 101.5, "c=4 p2")])

    names = {trace["name"] for trace in figure["data"]}
    assert names == {"GPU 0", "throttled"}  # the idle GPU the run does not use is left out
    [marker] = [t for t in figure["data"] if t["name"] == "throttled"]
    assert marker["y"] == [1320] and marker["text"] == ["SW thermal slowdown, HW thermal slowdown"]
    [cell] = figure["layout"]["shapes"]
    assert (cell["x0"], cell["x1"]) == ("1970-01-01T00:01:39.500+00:00", "1970-01-01T00:01:41.500+00:00")
    assert figure["layout"]["annotations"][0]["text"] == "c=4 p2"
    json.dumps(figure)  # what json_script hands to the page
