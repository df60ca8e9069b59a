"""The server's gauges as a time series during a cell, scraped by the benchmark client from the simulated host's
/metrics: what a speculative server and a baseline serve, the bound on how many samples a cell keeps, and a server
without metrics asked once."""

from __future__ import annotations

import itertools
import json

import pytest

from experiments.analysis.telemetry import SERVER_METRIC_FIELDS
from simhost.tests.conftest import EAGLE3_2STEP, launch, state_dir  # noqa: F401  (fixtures)
from workers.benchclient import __main__ as cli
from workers.benchclient import prometheus
from workers.benchclient.client import BenchConfig, run_benchmark

# Decode-log ticks every 2 steps: the gauges move several times within a short cell, as they do in a long real one.
TICKS = ("--decode-log-interval", "2")
NO_NOISE = {"SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0"}


async def _bench(server, **fields) -> dict:
    config = BenchConfig(base_url=server.base, concurrency=4, num_prompts=8, input_len=32, output_len=48, **fields)
    result, code = await run_benchmark(config)
    assert code == 0 and result["completed"] == 8, result
    return result


def _series(result: dict) -> dict[str, list]:
    metrics = result["server_metrics"]
    assert metrics["fields"] == ["ago_s", *prometheus.GAUGE_FIELDS]
    return {name: [row[i] for row in metrics["samples"]] for i, name in enumerate(metrics["fields"])}


async def test_it_samples_a_speculative_servers_gauges_through_the_cell(launch):  # noqa: F811
    # SGLang serves the active step gauges from 0.5.23 (simhost/versions.py); earlier ones leave them out.
    server = launch(*EAGLE3_2STEP, "--enable-metrics", *TICKS, env={**NO_NOISE, "SIMHOST_SGLANG_VERSION": "0.5.23"})
    server.wait_ready()

    result = await _bench(server, metrics_interval_ms=50)

    series = _series(result)
    assert result["server_metrics"]["interval_ms"] == 50
    ages = series["ago_s"]
    assert len(ages) >= 5, ages  # a cell of ~1 s on the simulated GPU's clock
    assert ages == sorted(ages, reverse=True) and ages[-1] >= 0
    # Never faster than asked: scrapes are stamped when asked, on a schedule of at least 50 ms; the ages are rounded
    # to 1 ms each, so two of them may read up to 1 ms closer (a loaded machine only spreads them further).
    assert min(a - b for a, b in itertools.pairwise(ages)) >= 0.049
    assert ages[0] <= result["duration_s"] + 1.0  # taken during the cell, not the warm-up before it
    assert max(series["num_running_reqs"]) == 4 and max(series["token_usage"]) > 0
    assert max(series["gen_throughput"]) > 0
    assert all(1.0 <= a <= 3.0 for a in series["spec_accept_length"]) and max(series["spec_accept_length"]) > 1.5
    assert max(series["spec_accept_rate"]) > 0
    assert set(series["spec_num_steps"]) - {0.0} == {2.0} and set(series["spec_num_draft_tokens"]) - {0.0} == {3.0}


async def test_a_baseline_serves_no_step_gauges_and_a_long_cell_stays_bounded(launch, monkeypatch):  # noqa: F811
    monkeypatch.setattr(prometheus, "MAX_SAMPLES", 4)
    server = launch("--enable-metrics", *TICKS, env=NO_NOISE)
    server.wait_ready()

    result = await _bench(server, metrics_interval_ms=50)

    series = _series(result)
    assert 2 <= len(series["ago_s"]) <= 4  # thinned to every other sample each time it passed the bound
    assert result["server_metrics"]["interval_ms"] > 50  # ... at a coarser step
    assert max(series["num_running_reqs"]) > 0
    # SGLang registers the accept gauges for every server (a baseline's stay 0); the step gauges are speculative only.
    assert set(series["spec_accept_length"]) == {0.0}
    assert set(series["spec_num_steps"]) == set(series["spec_num_draft_tokens"]) == {None}


async def test_a_server_without_metrics_gives_no_series_and_sampling_can_be_off(launch):  # noqa: F811
    plain = launch(*TICKS, env=NO_NOISE)
    plain.wait_ready()

    assert (await _bench(plain))["server_metrics"] is None
    metrics = launch("--enable-metrics", *TICKS, env={**NO_NOISE, "CUDA_VISIBLE_DEVICES": "1"})
    metrics.wait_ready()
    assert (await _bench(metrics, metrics_interval_ms=0))["server_metrics"] is None


def test_the_worker_stores_every_gauge_the_client_samples_under_its_name():
    assert SERVER_METRIC_FIELDS == prometheus.GAUGE_FIELDS


def test_it_combines_a_gauges_label_sets_counts_added_and_ratios_averaged():
    text = "\n".join(
        [
            "# TYPE sglang:num_running_reqs gauge",
            'sglang:num_running_reqs{dp_rank="0",model_name="m"} 3.0',
            'sglang:num_running_reqs{dp_rank="1",model_name="m"} 5.0',
            'sglang:spec_accept_length{dp_rank="0",model_name="m"} 2.0',
            'sglang:spec_accept_length{dp_rank="1",model_name="m"} 3.0',
            'sglang:token_usage{model_name="m"} NaN',
            "sglang:num_queue_reqs{broken",
            'sglang:num_running_reqs_created{model_name="m"} 1.7e9',
        ]
    )

    values = dict(zip(prometheus.GAUGE_FIELDS, prometheus.gauge_values(text), strict=True))

    assert values["num_running_reqs"] == 8.0 and values["spec_accept_length"] == 2.5
    assert values["token_usage"] is None and values["num_queue_reqs"] is None


@pytest.mark.parametrize("interval", ["10", "20000", "-5"])
def test_it_refuses_a_scrape_interval_out_of_bounds(interval, capsys):
    argv = ["--base-url", "http://127.0.0.1:1", "--concurrency", "1", "--num-prompts", "1"]
    argv += ["--input-len", "1", "--output-len", "1", "--metrics-interval-ms", interval]

    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)

    assert exit_info.value.code == 2 and "must be 0 (off) or 50-10000" in capsys.readouterr().err
    with pytest.raises(ValueError, match="50-10000 ms"):
        prometheus.GaugeSampler("http://127.0.0.1:1", int(interval))


async def test_a_streamed_cell_sends_its_samples_on_stderr_once_and_the_result_keeps_the_rest(launch, capsys):  # noqa: F811
    server = launch(*EAGLE3_2STEP, "--enable-metrics", *TICKS, env=NO_NOISE)
    server.wait_ready()
    config = BenchConfig(base_url=server.base, concurrency=4, num_prompts=24, input_len=32, output_len=96,
                         metrics_interval_ms=50, stream_metrics=True)  # fmt: skip

    result, code = await run_benchmark(config)

    assert code == 0 and result["duration_s"] > 1.5, result  # long enough for a line a second
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(prometheus.STREAM_PREFIX)]
    streamed = [json.loads(line.removeprefix(prometheus.STREAM_PREFIX))["samples"] for line in lines]
    assert lines and all(len(line) <= prometheus.MAX_STREAM_LINE for line in lines)
    kept = result["server_metrics"]["samples"]
    # Every scrape once, streamed or kept: about one per 50 ms of the cell (never more; a loaded machine: fewer).
    total = sum(map(len, streamed)) + len(kept)
    assert result["duration_s"] / 0.05 / 3 <= total <= result["duration_s"] / 0.049 + 2, (total, result["duration_s"])
    assert all(age < 2.5 for batch in streamed for age, *_ in batch)  # each line carries only its last second
