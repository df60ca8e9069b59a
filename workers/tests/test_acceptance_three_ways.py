"""Acceptance three ways against the simulated host: the pooled figure from its Prometheus counters (finished
requests only, scraped after the warm-up and after the cell) equals the requests' token-weighted one; the mean of
per-request means is its own figure; without --enable-metrics there is no pooled figure, not a wrong one."""

from __future__ import annotations

import pytest

from experiments.analysis import acceptance
from simhost.tests.conftest import EAGLE3_2STEP, launch, state_dir  # noqa: F401  (fixtures)
from workers.benchclient import prometheus
from workers.benchclient.client import BenchConfig, run_benchmark

FAST = {"SIMHOST_SPEED": "0"}


async def _bench(server, **fields) -> dict:
    result, code = await run_benchmark(BenchConfig(base_url=server.base, concurrency=4, num_prompts=16, **fields))
    assert code == 0 and result["completed"] == 16, result
    return result


async def test_the_pooled_figure_equals_the_token_weighted_one_and_the_mean_of_requests_is_reported(launch):  # noqa: F811
    server = launch(*EAGLE3_2STEP, "--enable-metrics", env=FAST)
    server.wait_ready()

    first = await _bench(server, output_len=48)
    second = await _bench(server, output_len=96)  # the counters go on from the first cell: only the delta counts

    for result in (first, second):
        assert result["accept_length"] > 1.5
        assert result["pooled_accept_length"] == pytest.approx(result["accept_length"], rel=0.01)
        assert result["mean_request_accept_length"] == pytest.approx(result["accept_length"], rel=0.15)
        assert acceptance.disagreement(result["accept_length"], result["pooled_accept_length"]) is None


async def test_a_server_without_metrics_gives_no_pooled_figure(launch):  # noqa: F811
    server = launch(*EAGLE3_2STEP, env=FAST)
    server.wait_ready()

    result = await _bench(server, output_len=32)

    assert result["accept_length"] > 1.5 and result["pooled_accept_length"] is None


def test_it_sums_a_counter_over_its_label_sets_and_ignores_everything_else():
    text = "\n".join(
        [
            "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
            "# TYPE sglang:generation_tokens_total counter",
            'sglang:generation_tokens_total{model_name="a b",is_streaming="True"} 100.0',
            'sglang:generation_tokens_total{model_name="a b",is_streaming="False"} 20 1700000000000',
            'sglang:spec_verify_calls_total{model_name="a b"} 40.0',
            "sglang:spec_verify_calls_total_created 1.7e9",
            'sglang:num_requests_total{model_name="a b"} 5',
            "sglang:generation_tokens_total{broken",
            'sglang:spec_verify_calls_total{model_name="x"} NaN',
        ]
    )

    totals = prometheus.counter_totals(text)

    assert totals == {prometheus.GENERATION_TOKENS: 120.0, prometheus.VERIFY_CALLS: 40.0}
    before = {prometheus.GENERATION_TOKENS: 20.0, prometheus.VERIFY_CALLS: 10.0}
    assert prometheus.pooled_accept_length(before, totals) == pytest.approx(100 / 30)
    assert prometheus.pooled_accept_length(None, totals) is None
    assert prometheus.pooled_accept_length(totals, totals) is None  # nothing finished in between


def test_it_reads_the_servers_mean_e2e_latency_from_its_histogram_over_the_cell():
    text = "\n".join(
        [
            "# TYPE sglang:e2e_request_latency_seconds histogram",
            'sglang:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 3.0',
            'sglang:e2e_request_latency_seconds_sum{model_name="m"} 4.5',
            'sglang:e2e_request_latency_seconds_count{model_name="m"} 5.0',
        ]
    )
    before = {prometheus.E2E_LATENCY_SUM: 1.5, prometheus.E2E_LATENCY_COUNT: 1.0}

    after = prometheus.counter_totals(text)

    assert prometheus.server_mean_e2e_latency_ms(before, after) == pytest.approx(750.0)  # 3 s over 4 requests
    assert prometheus.server_mean_e2e_latency_ms(after, after) is None  # none finished in between
    assert prometheus.server_mean_e2e_latency_ms(None, after) is None


def test_it_flags_a_pooled_and_token_weighted_pair_that_disagree():
    assert acceptance.disagreement(2.50, 2.51) is None
    assert acceptance.disagreement(2.50, None) is None
    message = acceptance.disagreement(2.50, 2.70)
    assert message is not None and "2.700" in message and "2.500" in message and "8.0% apart" in message
