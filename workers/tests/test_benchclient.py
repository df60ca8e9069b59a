"""The benchmark client: its arithmetic on hand-computed timings, its SSE parsing, and the real program
run as a subprocess against a small streaming server that answers like SGLang."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from workers.benchclient.client import (
    OpenAICompletionStream,
    SglangStream,
    SseLineSplitter,
    StreamError,
    feed_sse,
    make_prompts,
)
from workers.benchclient.metrics import (
    RequestRecord,
    max_output_tokens_per_s,
    percentile,
    request_timings,
    summarize,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


# --- arithmetic -------------------------------------------------------------------------------------


def test_it_interpolates_percentiles_like_numpy() -> None:
    # Values checked against numpy.percentile(..., method="linear").
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)
    assert percentile([10.0, 20.0], 25) == pytest.approx(12.5)
    assert percentile([7.0], 99) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 100) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0) == 1.0


def _record(start: float, chunks: list[tuple[float, int]], end: float, **kwargs: Any) -> RequestRecord:
    return RequestRecord(
        prompt_len=kwargs.pop("prompt_len", 10),
        start=start,
        end=end,
        chunk_times=[at for at, _ in chunks],
        chunk_tokens=[tokens for _, tokens in chunks],
        output_len=kwargs.pop("output_len", sum(tokens for _, tokens in chunks)),
        **kwargs,
    )


def test_it_splits_each_chunk_gap_over_its_new_tokens() -> None:
    record = _record(0.0, [(0.5, 2), (0.7, 1), (1.0, 3)], end=1.1)

    timings = request_timings(record, split_itl=True)

    assert timings.ttft == pytest.approx(0.5)
    assert timings.latency == pytest.approx(1.1)
    assert timings.itl == pytest.approx([0.2, 0.1, 0.1, 0.1])
    assert timings.tpot == pytest.approx((1.1 - 0.5) / 5)


def test_it_keeps_whole_chunk_gaps_without_splitting() -> None:
    record = _record(0.0, [(0.5, 2), (0.7, 1), (1.0, 3)], end=1.1)

    assert request_timings(record, split_itl=False).itl == pytest.approx([0.2, 0.3])


def test_it_has_no_tpot_for_a_single_token() -> None:
    record = _record(1.0, [(1.25, 1)], end=1.25)

    timings = request_timings(record, split_itl=True)

    assert timings.tpot is None
    assert timings.itl == []
    assert timings.ttft == pytest.approx(0.25)


def test_it_summarizes_throughputs_latencies_and_accept_length() -> None:
    first = _record(0.0, [(0.1, 1), (0.3, 2), (0.5, 2)], end=0.5, prompt_len=8, spec_verify_ct=3)
    second = _record(0.2, [(0.6, 3), (1.4, 3)], end=1.5, prompt_len=8, spec_verify_ct=2)
    failed = RequestRecord(prompt_len=8, start=0.0, end=0.1, error="HTTP 500: boom")

    result = summarize([first, second, failed], duration=2.0, split_itl=True)

    assert result["completed"] == 2
    assert result["failed"] == 1
    assert result["errors"] == ["HTTP 500: boom"]
    assert result["total_input_tokens"] == 16
    assert result["total_output_tokens"] == 11
    assert result["request_throughput"] == pytest.approx(1.0)
    assert result["input_throughput"] == pytest.approx(8.0)
    assert result["output_throughput"] == pytest.approx(5.5)
    assert result["total_throughput"] == pytest.approx(13.5)
    # ttft 0.1 and 0.4 s
    assert result["mean_ttft_ms"] == pytest.approx(250.0)
    assert result["median_ttft_ms"] == pytest.approx(250.0)
    assert result["p90_ttft_ms"] == pytest.approx(370.0)
    # e2e 0.5 and 1.3 s; concurrency = 1.8 s of requests over 2 s
    assert result["mean_e2e_latency_ms"] == pytest.approx(900.0)
    assert result["p99_e2e_latency_ms"] == pytest.approx(500.0 + 800.0 * 0.99)
    assert result["concurrency_achieved"] == pytest.approx(0.9)
    # tpot (0.5-0.1)/4 = 0.1 and (1.3-0.4)/5 = 0.18
    assert result["mean_tpot_ms"] == pytest.approx(140.0)
    # itl: first 0.1, 0.1, 0.1, 0.1; second 0.8/3 three times
    itl = sorted([0.1] * 4 + [0.8 / 3] * 3)
    assert result["mean_itl_ms"] == pytest.approx(sum(itl) / 7 * 1000)
    assert result["median_itl_ms"] == pytest.approx(100.0)
    assert result["p90_itl_ms"] == pytest.approx(percentile(itl, 90) * 1000)
    # 11 tokens over 5 verify steps
    assert result["accept_length"] == pytest.approx(2.2)
    # second 0 (from start 0.0): 1+2+2+3 tokens; second 1: 3 tokens
    assert result["max_output_tokens_per_s"] == pytest.approx(8.0)


def test_it_reports_no_accept_length_for_a_non_speculative_server() -> None:
    record = _record(0.0, [(0.1, 1), (0.2, 1)], end=0.2)

    assert summarize([record], duration=1.0, split_itl=True)["accept_length"] is None


def test_it_reports_nulls_and_zero_throughput_when_nothing_completed() -> None:
    failures = [RequestRecord(prompt_len=4, start=0.0, end=0.0, error=f"error {n % 7}") for n in range(20)]

    result = summarize(failures, duration=0.0, split_itl=True)

    assert result["completed"] == 0
    assert result["failed"] == 20
    assert result["errors"] == ["error 0", "error 1", "error 2", "error 3", "error 4"]
    assert result["output_throughput"] == 0.0
    assert result["mean_ttft_ms"] is None
    assert result["p99_itl_ms"] is None
    json.dumps(result, allow_nan=False)


def test_it_scales_openai_chunk_counts_to_the_reported_usage() -> None:
    # Two text chunks, one counted token each, but usage said 6 tokens: 3 per chunk.
    record = _record(0.0, [(0.2, 1), (1.5, 1)], end=1.5, output_len=6)

    assert max_output_tokens_per_s([record]) == pytest.approx(3.0)


def test_it_makes_the_same_prompts_from_the_same_seed() -> None:
    prompts = make_prompts(3, 16, 100, seed=7)

    assert prompts == make_prompts(3, 16, 100, seed=7)
    assert prompts != make_prompts(3, 16, 100, seed=8)
    assert all(len(prompt) == 16 and all(0 <= token < 100 for token in prompt) for prompt in prompts)


# --- SSE parsing ------------------------------------------------------------------------------------


def _sglang_chunk(completion_tokens: int, **meta_info: Any) -> bytes:
    chunk = {
        "text": "tok " * completion_tokens,
        "output_ids": list(range(completion_tokens)),
        "meta_info": {
            "id": "abc",
            "finish_reason": None,
            "completion_tokens": completion_tokens,
            **meta_info,
        },
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def test_it_counts_new_tokens_from_cumulative_chunks_split_anywhere() -> None:
    body = (
        _sglang_chunk(1)
        + _sglang_chunk(1)  # no new token: not a chunk for the metrics
        + _sglang_chunk(4)
        + _sglang_chunk(6, finish_reason={"type": "length", "length": 6}, spec_verify_ct=3)
        + b"data: [DONE]\n\n"
    )
    record = RequestRecord(prompt_len=3, start=0.0)
    stream = SglangStream(record)
    splitter = SseLineSplitter()
    done_at = None
    # Pieces of 7 bytes cut lines, JSON and the [DONE] marker at arbitrary places.
    for index in range(0, len(body), 7):
        if feed_sse(stream, splitter.split(body[index : index + 7]), now=float(index)):
            done_at = index
            break
    stream.finish()

    assert done_at is not None
    assert record.chunk_tokens == [1, 3, 2]
    assert record.chunk_times == sorted(record.chunk_times)
    assert record.output_len == 6
    assert record.spec_verify_ct == 3


def test_it_reads_meta_info_even_when_the_text_mentions_it() -> None:
    chunk = {"text": '"meta_info": {"completion_tokens": 99}', "meta_info": {"completion_tokens": 2}}
    record = RequestRecord(prompt_len=1, start=0.0)
    stream = SglangStream(record)

    feed_sse(stream, [b"data:" + json.dumps(chunk).encode(), b"", b": keep-alive"], now=1.0)

    assert record.chunk_tokens == [2]


def test_it_raises_on_an_error_chunk() -> None:
    stream = SglangStream(RequestRecord(prompt_len=1, start=0.0))

    with pytest.raises(StreamError, match="out of KV cache"):
        feed_sse(stream, [b'data: {"error": {"message": "out of KV cache"}}'], now=1.0)


def test_it_fails_an_aborted_request() -> None:
    stream = SglangStream(RequestRecord(prompt_len=1, start=0.0))
    feed_sse(stream, [_sglang_chunk(2, finish_reason={"type": "abort", "message": "client gone"}).strip()], 1.0)

    with pytest.raises(StreamError, match="client gone"):
        stream.finish()


def test_it_takes_openai_output_length_from_usage() -> None:
    record = RequestRecord(prompt_len=1, start=0.0)
    stream = OpenAICompletionStream(record)
    lines = [
        b'data: {"choices":[{"index":0,"text":"","finish_reason":null}],"usage":null}',
        b'data: {"choices":[{"index":0,"text":"a b","finish_reason":null}],"usage":null}',
        b'data: {"choices":[{"index":0,"text":" c","finish_reason":"length"}],"usage":null}',
        b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}',
        b"data: [DONE]",
    ]

    assert feed_sse(stream, lines, now=2.0)
    stream.finish()

    assert record.chunk_tokens == [1, 1]
    assert record.output_len == 3


# --- the program against a streaming server ---------------------------------------------------------


@dataclass
class FakeSglang:
    """Streams cumulative SGLang-shaped chunks: tokens_per_chunk new tokens every chunk_interval seconds."""

    tokens_per_chunk: int = 3
    chunk_interval: float = 0.02
    # 1-based call numbers (warm-up included) answered with HTTP 500 / with an error chunk mid-stream.
    http_500_calls: set[int] = field(default_factory=set)
    error_chunk_calls: set[int] = field(default_factory=set)
    calls: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        call = self.calls
        body = await request.json()
        self.bodies.append(body)
        if call in self.http_500_calls:
            return web.Response(status=500, text="Internal Server Error")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._stream(request, body, call)
        finally:
            self.in_flight -= 1

    async def _stream(self, request: web.Request, body: dict[str, Any], call: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        wanted = body["sampling_params"]["max_new_tokens"]
        produced = verify_steps = 0
        while produced < wanted:
            await asyncio.sleep(self.chunk_interval)
            if call in self.error_chunk_calls and produced:
                await response.write(b'data: {"error": {"message": "scheduler went away"}}\n\n')
                return response
            produced = min(wanted, produced + self.tokens_per_chunk)
            verify_steps += 1
            meta_info: dict[str, Any] = {
                "prompt_tokens": len(body["input_ids"]),
                "completion_tokens": produced,
            }
            if produced == wanted:
                meta_info |= {
                    "finish_reason": {"type": "length", "length": wanted},
                    "spec_verify_ct": verify_steps,
                }
            chunk = {"text": "x" * produced, "output_ids": list(range(produced)), "meta_info": meta_info}
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "sim-model", "object": "model"}]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        wanted = body["max_tokens"]
        produced = 0
        while produced < wanted:
            await asyncio.sleep(self.chunk_interval)
            step = min(self.tokens_per_chunk, wanted - produced)
            produced += step
            chunk = {
                "object": "text_completion",
                "choices": [{"index": 0, "text": " t" * step}],
                "usage": None,
            }
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": produced}
        await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response


@pytest.fixture
async def fake_sglang() -> AsyncIterator[tuple[FakeSglang, str]]:
    server = FakeSglang()
    app = web.Application()
    app.router.add_post("/generate", server.generate)
    app.router.add_get("/v1/models", server.models)
    app.router.add_post("/v1/completions", server.completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield server, f"http://{host}:{port}"
    await runner.cleanup()


async def _run_client(*args: str, cwd: Path = REPO_ROOT, module: str = "workers.benchclient") -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


def _cell_args(base_url: str, *, concurrency: int, num_prompts: int, output_len: int, **extra: str) -> list[str]:
    args = ["--base-url", base_url, "--concurrency", str(concurrency), "--num-prompts", str(num_prompts)]
    args += ["--input-len", "16", "--output-len", str(output_len), "--seed", "3"]
    for flag, value in extra.items():
        args += [f"--{flag.replace('_', '-')}", value]
    return args


async def test_it_benchmarks_a_streaming_server(fake_sglang: tuple[FakeSglang, str]) -> None:
    server, base_url = fake_sglang

    exit_code, stdout, stderr = await _run_client(
        *_cell_args(base_url, concurrency=4, num_prompts=8, output_len=24, vocab_size="500")
    )

    assert exit_code == 0, stderr
    result = json.loads(stdout)  # the whole of stdout is one JSON object
    assert result["completed"] == 8
    assert result["failed"] == 0
    assert result["errors"] == []
    assert result["total_input_tokens"] == 8 * 16
    assert result["total_output_tokens"] == 8 * 24
    # 8 chunks of 20 ms per request, two waves of 4: about 0.33 s.
    assert 0.3 < result["duration_s"] < 2.0
    assert result["output_throughput"] == pytest.approx(8 * 24 / result["duration_s"])
    assert result["request_throughput"] == pytest.approx(8 / result["duration_s"])
    assert 3.0 < result["concurrency_achieved"] <= 4.0
    # Each 20 ms gap carries 3 tokens: an ITL of 6.7 ms, a TPOT of 7 gaps / 23 tokens.
    assert result["median_itl_ms"] == pytest.approx(20 / 3, rel=0.3)
    assert result["mean_tpot_ms"] == pytest.approx(7 * 20 / 23, rel=0.3)
    assert result["median_ttft_ms"] == pytest.approx(20, rel=0.5)
    assert result["accept_length"] == pytest.approx(3.0)
    assert result["max_output_tokens_per_s"] > 0
    # Warm-up first: 16 random ids below the vocabulary size, at most 32 output tokens, then the cell.
    assert server.calls == 9
    assert server.max_in_flight == 4
    warmup, first = server.bodies[0], server.bodies[1]
    assert warmup["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 24, "ignore_eos": True}
    assert warmup["stream"] is True
    assert len(first["input_ids"]) == 16 and max(first["input_ids"]) < 500


async def test_it_counts_failed_requests_without_failing_the_run(fake_sglang: tuple[FakeSglang, str]) -> None:
    server, base_url = fake_sglang
    server.http_500_calls = {3}
    server.error_chunk_calls = {5}

    exit_code, stdout, stderr = await _run_client(
        *_cell_args(base_url, concurrency=2, num_prompts=6, output_len=6, warmup_requests="0")
    )

    assert exit_code == 0, stderr
    result = json.loads(stdout)
    assert result["completed"] == 4
    assert result["failed"] == 2
    assert result["total_output_tokens"] == 4 * 6
    assert sorted(result["errors"]) == [
        "HTTP 500: Internal Server Error",
        "stream error: scheduler went away",
    ]


async def test_it_uses_the_openai_endpoint(fake_sglang: tuple[FakeSglang, str]) -> None:
    server, base_url = fake_sglang

    exit_code, stdout, stderr = await _run_client(
        *_cell_args(base_url, concurrency=2, num_prompts=2, output_len=40, backend="sglang-oai")
    )

    assert exit_code == 0, stderr
    result = json.loads(stdout)
    assert result["completed"] == 2
    assert result["total_output_tokens"] == 80
    assert result["accept_length"] is None
    assert server.bodies[0]["model"] == "sim-model"
    assert server.bodies[0]["max_tokens"] == 32  # the warm-up cap
    assert server.bodies[1]["stream_options"] == {"include_usage": True}


async def test_it_runs_as_a_standalone_package(fake_sglang: tuple[FakeSglang, str], tmp_path: Path) -> None:
    _, base_url = fake_sglang
    # The way the host runs it: the directory alone, named benchclient, with its parent as cwd.
    shutil.copytree(REPO_ROOT / "workers" / "benchclient", tmp_path / "benchclient")

    exit_code, stdout, stderr = await _run_client(
        *_cell_args(base_url, concurrency=1, num_prompts=1, output_len=3), cwd=tmp_path, module="benchclient"
    )

    assert exit_code == 0, stderr
    assert json.loads(stdout)["completed"] == 1


async def test_it_exits_1_when_the_server_is_unreachable(unused_tcp_port: int) -> None:
    exit_code, stdout, _ = await _run_client(
        *_cell_args(f"http://127.0.0.1:{unused_tcp_port}", concurrency=2, num_prompts=3, output_len=4)
    )

    assert exit_code == 1
    result = json.loads(stdout)
    assert result["failed"] == 3
    assert result["errors"][0].startswith("cannot connect")


@pytest.mark.parametrize(
    "bad_args",
    [
        [
            "--concurrency",
            "1",
            "--num-prompts",
            "1",
            "--input-len",
            "1",
            "--output-len",
            "1",
        ],  # no --base-url
        [
            "--base-url",
            "http://x",
            "--concurrency",
            "0",
            "--num-prompts",
            "1",
            "--input-len",
            "1",
            "--output-len",
            "1",
        ],
        [
            "--base-url",
            "http://x",
            "--concurrency",
            "1",
            "--num-prompts",
            "1",
            "--input-len",
            "1",
            "--output-len",
            "1",
            "--backend",
            "vllm",
        ],
    ],
)
async def test_it_exits_2_for_bad_arguments(bad_args: list[str]) -> None:
    exit_code, stdout, stderr = await _run_client(*bad_args)

    assert exit_code == 2
    assert stdout == ""
    assert "error" in stderr
