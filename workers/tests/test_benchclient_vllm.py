"""The benchmark client's vLLM backend: acceptance from vLLM's spec_decode counters read as `vllm bench serve` reads
them, its gauges under the names the SGLang backends give theirs, and its /v1/completions stream (several tokens per
chunk, token ids, per-request spec metrics), on text written from the reference's formats (vllm-interface §3.2, §6);
then against simhost's vLLM personality (`python -m simhost.vllm_serve`), where a cell's figures must agree with the
server's own `SpecDecoding metrics:` lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from experiments.analysis import acceptance
from simhost.ports import free_port
from simhost.tests.conftest import DRAFT, REPO, TARGET, Server
from simhost.vllm import lines as vllm_lines
from workers.benchclient import prometheus
from workers.benchclient.client import BenchConfig, run_benchmark
from workers.benchclient.metrics import RequestRecord, request_timings, summarize
from workers.benchclient.streams import OpenAICompletionStream, SseReceiver, StreamError, feed_sse


def _spec_counters(drafts: int, draft_tokens: int, accepted: int, per_position: list[int], *, engine: str) -> str:
    """One engine's spec-decode counters as prometheus_client exposes them: `_total` counters, `_created` gauges."""
    labels = f'engine="{engine}",model_name="m"'
    lines = []
    for name, value, help_text in (
        ("num_drafts", drafts, "Number of spec decoding drafts."),
        ("num_draft_tokens", draft_tokens, "Number of draft tokens."),
        ("num_accepted_tokens", accepted, "Number of accepted tokens."),
    ):
        lines += [
            f"# HELP vllm:spec_decode_{name}_total {help_text}",
            f"# TYPE vllm:spec_decode_{name}_total counter",
            f"vllm:spec_decode_{name}_total{{{labels}}} {float(value)}",
            f"# HELP vllm:spec_decode_{name}_created {help_text}",
            f"# TYPE vllm:spec_decode_{name}_created gauge",
            f"vllm:spec_decode_{name}_created{{{labels}}} 1.7961536906873662e+09",
        ]
    lines += [
        "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    for position, value in enumerate(per_position):
        lines.append(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{position}"}} {float(value)}'
        )
    for position in range(len(per_position)):
        lines.append(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_created{{{labels},position="{position}"}} 1.79615369e+09'
        )
    return "\n".join(lines) + "\n"


def _scrape(*engines: str, extra: str = "") -> dict[str, float]:
    return prometheus.counter_totals("".join(engines) + extra, prometheus.VLLM.counters, prometheus.VLLM.per_position)


# --- acceptance from the counters -------------------------------------------------------------------


def test_it_computes_acceptance_from_the_counter_deltas_as_vllm_bench_serve_does() -> None:
    before = _scrape(_spec_counters(10, 30, 12, [7, 4, 1], engine="0"), _spec_counters(0, 0, 0, [0, 0, 0], engine="1"))
    after = _scrape(
        _spec_counters(110, 330, 162, [87, 54, 21], engine="0"), _spec_counters(50, 150, 60, [30, 20, 10], engine="1")
    )

    figures = prometheus.spec_decode_figures(before, after)

    # Both engines summed, the `_created` timestamps not counted: 150 drafts of 450 tokens, 210 accepted.
    assert figures["spec_decode_num_drafts"] == 150
    assert figures["spec_decode_draft_tokens"] == 450
    assert figures["spec_decode_accepted_tokens"] == 210
    assert figures["spec_decode_accepted_per_position"] == [110, 70, 30]
    assert figures["spec_decode_acceptance_rate"] == pytest.approx(100 * 210 / 450)
    # vLLM's own mean acceptance length; the pooled figure needs the generated tokens, which this scrape lacks.
    assert figures["server_accept_length"] == pytest.approx(1 + 210 / 150)
    assert figures["pooled_accept_length"] is None
    assert figures["position_acceptance"] == pytest.approx([110 / 150, 70 / 150, 30 / 150])
    # Drafts that accepted exactly 0, 1, 2, 3 tokens; the rates are what SGLang's per-request histograms give.
    assert figures["accepted_drafts_histogram"] == [40, 40, 40, 30]
    assert sum(figures["accepted_drafts_histogram"]) == 150


def test_the_worker_stores_the_counters_histogram_and_rates_as_it_stores_sglangs() -> None:
    before = _scrape(_spec_counters(0, 0, 0, [0, 0, 0], engine="0"))
    after = _scrape(_spec_counters(7, 21, 9, [5, 3, 1], engine="0"))

    figures = prometheus.spec_decode_figures(before, after)
    fields, problems = acceptance.position_fields(figures)

    assert problems == []
    assert fields["accepted_drafts_histogram"] == [2, 2, 2, 1]
    assert fields["position_acceptance"] == figures["position_acceptance"] == pytest.approx([5 / 7, 3 / 7, 1 / 7])


def test_a_server_without_spec_counters_gives_every_key_as_none() -> None:
    baseline = _scrape(extra='vllm:num_requests_running{engine="0",model_name="m"} 3.0\n')

    figures = prometheus.spec_decode_figures(baseline, baseline)

    assert set(figures) == {*prometheus.VLLM_SPEC_KEYS, "pooled_accept_length", "server_accept_length",
                            "accepted_drafts_histogram", "position_acceptance"}  # fmt: skip
    assert set(figures.values()) == {None}
    assert set(prometheus.spec_decode_figures(None, None).values()) == {None}


def test_nothing_drafted_gives_counts_of_zero_and_no_rates() -> None:
    idle = _scrape(_spec_counters(5, 15, 6, [4, 2, 0], engine="0"))

    figures = prometheus.spec_decode_figures(idle, idle)

    assert figures["spec_decode_num_drafts"] == 0 and figures["spec_decode_accepted_per_position"] == [0, 0, 0]
    assert figures["pooled_accept_length"] is None and figures["spec_decode_acceptance_rate"] is None
    assert figures["position_acceptance"] is None and figures["accepted_drafts_histogram"] is None


def test_a_counter_that_went_back_is_no_measurement() -> None:
    before = _scrape(_spec_counters(100, 300, 150, [80, 50, 20], engine="0"))
    restarted = _scrape(_spec_counters(10, 30, 15, [8, 5, 2], engine="0"))

    assert set(prometheus.spec_decode_figures(before, restarted).values()) == {None}


def test_it_reads_vllms_gauges_under_the_names_the_result_gives_them() -> None:
    text = "\n".join(
        [
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="m"} 3.0',
            'vllm:num_requests_running{engine="1",model_name="m"} 4.0',
            'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0',
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25',
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75',
            'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9',
            'sglang:num_running_reqs{model_name="m"} 99.0',
        ]
    )

    values = dict(zip(prometheus.GAUGE_FIELDS, prometheus.gauge_values(text, prometheus.VLLM), strict=True))

    assert values["num_running_reqs"] == 7.0 and values["num_queue_reqs"] == 2.0
    assert values["token_usage"] == 0.5  # the current name first, the engines averaged
    assert values["gen_throughput"] is None and values["spec_accept_length"] is None
    # Before 0.11 the cache usage had only its older name.
    older = 'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9\n'
    assert prometheus.gauge_values(older, prometheus.VLLM)[prometheus.GAUGE_FIELDS.index("token_usage")] == 0.9
    # The SGLang table does not read vLLM's names.
    assert prometheus.gauge_values(text)[0] == 99.0


def test_it_gives_the_servers_own_mean_latency_from_vllms_histogram() -> None:
    def histogram(total: float, count: int) -> dict[str, float]:
        text = (
            f'vllm:e2e_request_latency_seconds_sum{{engine="0",model_name="m"}} {total}\n'
            f'vllm:e2e_request_latency_seconds_count{{engine="0",model_name="m"}} {float(count)}\n'
        )
        return prometheus.counter_totals(text, prometheus.VLLM.counters, prometheus.VLLM.per_position)

    before, after = histogram(2.0, 1), histogram(6.5, 4)

    assert prometheus.server_mean_e2e_latency_ms(before, after, prometheus.VLLM) == pytest.approx(1500.0)
    assert prometheus.server_mean_e2e_latency_ms(before, after) is None  # SGLang's names are not there


# --- the stream -------------------------------------------------------------------------------------


def _chunk(text: str, token_ids: list[int] | None = None, finish_reason: str | None = None) -> bytes:
    """A vLLM completion chunk, dumped with exclude_unset=False (§6): its nulls spelled out."""
    choice = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
        "prompt_token_ids": None,
        "token_ids": token_ids,
    }
    event = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(event | {"usage": None}).encode()


def _usage_chunk(completion_tokens: int, **extra: Any) -> bytes:
    """The final usage chunk, dumped with exclude_none=True: empty choices, the usage, vLLM 0.30+'s metrics."""
    usage = {"prompt_tokens": 4, "total_tokens": 4 + completion_tokens, "completion_tokens": completion_tokens}
    event = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [], "usage": usage}
    return b"data: " + json.dumps(event | extra).encode()


def _stream(lines_at: list[tuple[float, bytes]], *, keep_output: bool = False) -> RequestRecord:
    record = RequestRecord(prompt_len=4, start=0.0, keep_output=keep_output)
    receiver = SseReceiver(OpenAICompletionStream(record), record)
    for at, line in lines_at:
        receiver(line + b"\n\n", at)
    receiver.end_of_body()
    return record


def test_it_times_each_engine_step_chunk_and_counts_its_token_ids() -> None:
    record = _stream(
        [
            (0.5, _chunk(" a", [11])),  # the prefill's token
            (0.6, _chunk(" b c d", [12, 13, 14])),  # a step that accepted two drafts
            (0.7, _chunk(" e", [15])),
            (0.9, _chunk(" f g", [16, 17], finish_reason="length")),
            (0.9, _usage_chunk(7)),
            (0.9, b"data: [DONE]"),
        ],
        keep_output=True,
    )

    assert record.chunk_times == [0.5, 0.6, 0.7, 0.9] and record.chunk_tokens == [1, 3, 1, 2]
    assert record.output_len == 7 and record.output_ids == [11, 12, 13, 14, 15, 16, 17]
    # TTFT at the first chunk, one inter-token latency per chunk as vllm bench serve reports them.
    timings = request_timings(record, split_itl=False)
    assert timings.ttft == pytest.approx(0.5)
    assert timings.itl == pytest.approx([0.1, 0.1, 0.2])
    assert timings.tpot == pytest.approx(0.4 / 6)


def test_without_token_ids_the_usage_gives_the_count() -> None:
    record = _stream(
        [
            (0.5, _chunk(" a")),
            (0.6, _chunk(" b c d")),
            (0.8, _chunk(" e f", finish_reason="length")),
            (0.8, _usage_chunk(6)),
            (0.8, b"data: [DONE]"),
        ],
        keep_output=True,
    )

    assert record.chunk_tokens == [1, 1, 1] and record.output_len == 6
    assert record.output_ids is None  # asked without return_token_ids: nothing to compare
    assert record.spec_verify_ct is None and record.spec_drafts_histogram is None


def test_it_reads_the_per_request_spec_metrics_of_the_usage_chunk() -> None:
    spec = {
        "mean_acceptance_length": 2.5,
        "draft_acceptance_rate": 0.5,
        "acceptance_histogram": [1, 0, 1, 0],
        "num_spec_steps": 2,
        "num_accepted_draft_tokens": 2,
        "num_draft_tokens": 6,
        "num_spec_tokens": 3,
    }
    record = _stream(
        [
            (0.5, _chunk(" a", [1])),
            (0.6, _chunk(" b", [2])),
            (0.7, _chunk(" c d e", [3, 4, 5])),
            (0.7, _usage_chunk(5, metrics={"speculative_decoding": spec})),
            (0.7, b"data: [DONE]"),
        ]
    )

    assert record.spec_verify_ct == 2 and record.spec_drafts_histogram == [1, 0, 1, 0]
    result = summarize([record], duration=1.0, split_itl=False)
    assert result["accept_length"] == pytest.approx(5 / 2)
    assert result["accepted_drafts_histogram"] == [1, 0, 1, 0]
    assert result["position_acceptance"] == pytest.approx([0.5, 0.5, 0.0])


def test_a_usage_chunk_alone_is_no_output_and_an_error_event_fails_the_request() -> None:
    record = RequestRecord(prompt_len=4, start=0.0)
    stream = OpenAICompletionStream(record)
    assert feed_sse(stream, [_usage_chunk(0), b"data: [DONE]"], 1.0)
    assert record.chunk_times == []

    error = b'data: {"error": {"message": "EngineCore encountered an issue.", "type": "BadRequestError", "code": 400}}'
    failed = RequestRecord(prompt_len=4, start=0.0)
    with pytest.raises(StreamError, match="EngineCore encountered an issue"):
        feed_sse(OpenAICompletionStream(failed), [_chunk(" a", [1]), error], 1.0)


# --- against simhost's vLLM personality -------------------------------------------------------------

EAGLE3_K3 = ["--speculative-config", json.dumps({"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 3})]
# Stats lines every half second, so that every draft of a cell is in a printed line soon after it.
STATS_INTERVAL_S = 0.5
QUIET = {"SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0", "VLLM_LOG_STATS_INTERVAL": str(STATS_INTERVAL_S)}


def start_vllm(tmp: Path, *flags: str, version: str) -> Server:
    """`python -m simhost.vllm_serve` as specdash launches a server: own session, stdout+stderr to one log file."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SIMHOST_LOAD_SECONDS": "0.3",
        "SIMHOST_STATE_DIR": str(tmp / "state"),
        "SIMHOST_VLLM_VERSION": version,
        **QUIET,
    }
    log = tmp / f"vllm-{port}.log"
    # Two ranks of simulated GPUs the whole model fits on: two processes, not eight, on the loaded test machine.
    env["SIMHOST_GPU_MEMORY_MIB"] = "700000"
    argv = [sys.executable, "-m", "simhost.vllm_serve", TARGET, "--port", str(port), "-tp", "2", *flags]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp, start_new_session=True)
    server = Server(proc, port, log, env)
    try:
        # Uvicorn's line, with the process prefix of the versions that put one on every line.
        server.wait_for(r"INFO:     Application startup complete\.")
    except BaseException:
        stop_vllm(server)
        raise
    return server


def stop_vllm(server: Server) -> None:
    server.signal_group(signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(5)


@pytest.fixture(scope="module")
def vllm_eagle3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One EAGLE-3 server (K = 3) for the module: vLLM 0.33.0 with its per-request spec metrics."""
    server = start_vllm(
        tmp_path_factory.mktemp("vllm"), *EAGLE3_K3, "--per-request-spec-decode-metrics", "summary", version="0.33.0"
    )
    yield server
    stop_vllm(server)


def _spec_lines(text: str) -> list[re.Match[str]]:
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return [m for m in map(re.compile(vllm_lines.SPEC_B_RE).search, plain.splitlines()) if m]


async def _printed_lines(server: Server) -> list[re.Match[str]]:
    """The server's SpecDecoding lines once they account for every draft token its counters have seen (a line comes
    every STATS_INTERVAL_S while drafts are observed); what they hold then after at most 15 s."""
    async with aiohttp.ClientSession() as session:
        counters = await prometheus.scrape(session, server.base, prometheus.VLLM)
    assert counters is not None
    drafted = counters[prometheus.VLLM_DRAFT_TOKENS]
    deadline = time.monotonic() + 15
    while True:
        spec = _spec_lines(server.text())
        if sum(int(m["drafted"]) for m in spec) >= drafted or time.monotonic() > deadline:
            return spec
        await asyncio.sleep(STATS_INTERVAL_S / 2)


async def test_a_cell_agrees_with_the_servers_spec_decoding_lines(vllm_eagle3: Server) -> None:
    lines_before = len(await _printed_lines(vllm_eagle3))
    config = BenchConfig(
        base_url=vllm_eagle3.base, backend="vllm", concurrency=4, num_prompts=12, input_len=32, output_len=64,
        warmup_requests=0, metrics_interval_ms=50,
    )  # fmt: skip

    result, code = await run_benchmark(config)
    printed = await _printed_lines(vllm_eagle3)

    assert code == 0 and result["completed"] == 12 and result["total_output_tokens"] == 12 * 64, result
    spec = printed[lines_before:]
    assert spec, vllm_eagle3.text()[-3000:]
    accepted, drafted = sum(int(m["acc"]) for m in spec), sum(int(m["drafted"]) for m in spec)
    # The counters' deltas are the lines' sums, exactly.
    assert result["spec_decode_accepted_tokens"] == accepted and result["spec_decode_draft_tokens"] == drafted
    drafts = result["spec_decode_num_drafts"]
    assert drafted == 3 * drafts
    assert result["spec_decode_acceptance_rate"] == pytest.approx(100 * accepted / drafted)
    # The lines' means, weighted by their drafts (printed to 2 and 3 decimals), agree with the pooled figures.
    line_drafts = [int(m["drafted"]) / 3 for m in spec]
    line_length = sum(float(m["mal"]) * n for m, n in zip(spec, line_drafts, strict=True)) / drafts
    assert result["server_accept_length"] == pytest.approx(line_length, rel=0.01)
    assert 1.5 < result["server_accept_length"] < 4.0
    # The pooled figure is SGLang's definition, output tokens per verify step: vLLM's plus each request's prefill token.
    assert result["pooled_accept_length"] == pytest.approx(result["total_output_tokens"] / drafts)
    line_rates = [[float(r) for r in m["pos"].split(", ")] for m in spec]
    for position, rate in enumerate(result["position_acceptance"]):
        weighted = sum(rates[position] * n for rates, n in zip(line_rates, line_drafts, strict=True)) / drafts
        assert rate == pytest.approx(weighted, abs=0.005)
    assert sum(result["accepted_drafts_histogram"]) == drafts
    # Each request: its prefill token, then per draft the accepted tokens and one more.
    assert result["total_output_tokens"] == result["completed"] + drafts + accepted
    # The requests' own metrics (0.30+) count the same drafts: the token-weighted accept length over their steps.
    assert result["accept_length"] == pytest.approx(result["total_output_tokens"] / drafts)
    assert all(row["accept_length"] for row in result["requests"])
    # Throughput and latencies: the cell's tokens over its duration; the server's own mean latency at most the client's.
    assert result["output_throughput"] == pytest.approx(result["total_output_tokens"] / result["duration_s"])
    assert 0 < result["server_mean_e2e_latency_ms"] <= result["mean_e2e_latency_ms"]
    assert result["mean_itl_ms"] > 0 and result["max_output_tokens_per_s"] > 0
    # vLLM's gauges under the result's names: up to 4 requests running, its KV cache in use; no step gauges.
    metrics = result["server_metrics"]
    series = {name: [row[i] for row in metrics["samples"]] for i, name in enumerate(metrics["fields"])}
    assert max(series["num_running_reqs"]) == 4 and max(series["token_usage"]) > 0
    assert None not in series["num_queue_reqs"] and set(series["spec_accept_length"]) == {None}


async def test_the_command_line_runs_the_vllm_backend(vllm_eagle3: Server) -> None:
    argv = ["--base-url", vllm_eagle3.base, "--backend", "vllm", "--concurrency", "2", "--num-prompts", "4"]
    argv += ["--input-len", "16", "--output-len", "20", "--keep-outputs"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workers.benchclient", *argv, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)

    assert process.returncode == 0, stderr.decode()
    result = json.loads(stdout)
    assert result["backend"] == "vllm" and result["completed"] == 4 and result["total_output_tokens"] == 80
    assert result["pooled_accept_length"] > 1 and len(result["position_acceptance"]) == 3
    # The warm-up ran before the first scrape: the counters count the cell's 4 requests only.
    assert result["total_output_tokens"] == 4 + result["spec_decode_num_drafts"] + result["spec_decode_accepted_tokens"]


async def test_a_baseline_vllm_has_no_acceptance(tmp_path: Path) -> None:
    # 0.11.0: no per-request metrics either.
    server = start_vllm(tmp_path, version="0.11.0")
    try:
        config = BenchConfig(base_url=server.base, backend="vllm", concurrency=2, num_prompts=4, output_len=24)
        result, code = await run_benchmark(config)
    finally:
        stop_vllm(server)

    assert code == 0 and result["completed"] == 4 and result["total_output_tokens"] == 96, result
    for key in (*prometheus.VLLM_SPEC_KEYS, "pooled_accept_length", "accept_length", "accepted_drafts_histogram"):
        assert result[key] is None, key
    assert result["position_acceptance"] is None and result["server_mean_e2e_latency_ms"] > 0
