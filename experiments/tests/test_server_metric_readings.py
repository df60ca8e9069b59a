"""The server's metrics a benchmark client reports from the host, read onto the worker's clock: only the named
gauges, only sound numbers, a bounded count; a report of any other shape is no readings, never an error."""

from __future__ import annotations

import math

import pytest

from experiments.analysis.telemetry import (
    MAX_SERVER_METRIC_SAMPLES,
    SERVER_METRIC_FIELDS,
    ServerMetricReading,
    server_metric_readings,
)


def test_it_dates_each_sample_by_its_age_when_the_result_arrived():
    report = {
        "interval_ms": 250,
        "fields": ["ago_s", "num_running_reqs", "spec_accept_length"],
        "samples": [[0.5, 4.0, 2.5], [0.25, 3.0, None]],
    }

    readings = server_metric_readings(report, written_at=1000.0)

    assert readings == [
        ServerMetricReading(t=999.5, num_running_reqs=4.0, spec_accept_length=2.5),
        ServerMetricReading(t=999.75, num_running_reqs=3.0),
    ]


def test_it_reads_only_the_named_gauges_and_only_sound_numbers():
    fields = ["ago_s", "num_queue_reqs", "token_usage", "gen_throughput", "spec_accept_rate", "run_id", "__class__"]
    report = {
        "fields": fields,
        "samples": [
            [0.1, math.nan, -1.0, True, "1; DROP TABLE", 7, 8],
            [math.inf, 1.0, 0.5, 10.0, 0.7, 0, 0],  # no sound age: not a sample of this cell
            [-0.1, 1.0, 0.5, 10.0, 0.7, 0, 0],
            [1e12, 1.0, 0.5, 10.0, 0.7, 0, 0],
            [0.2, 1.0],  # a row cut short
            "not a row",
        ],
    }

    (reading,) = server_metric_readings(report, written_at=50.0)

    assert reading == ServerMetricReading(t=49.9)
    assert set(reading.stored_fields()) == set(SERVER_METRIC_FIELDS)


@pytest.mark.parametrize(
    "report",
    [None, [], "text", {"fields": "ago_s", "samples": []}, {"fields": ["t", "num_queue_reqs"], "samples": [[1, 2]]}],
)
def test_a_report_of_another_shape_is_no_readings(report):
    assert server_metric_readings(report, written_at=1.0) == []


def test_it_keeps_a_bounded_number_of_samples():
    report = {"fields": ["ago_s", "num_running_reqs"], "samples": [[0.001, 1.0]] * (MAX_SERVER_METRIC_SAMPLES + 50)}

    assert len(server_metric_readings(report, written_at=100.0)) == MAX_SERVER_METRIC_SAMPLES
