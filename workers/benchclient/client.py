"""The load generator: N concurrent streaming requests against one SGLang or vLLM server, like bench_serving
with --request-rate inf --max-concurrency N.

Backends: "sglang" (native /generate), "sglang-oai" and "vllm" (/v1/completions streaming, one stream reader for
both: streams.OpenAICompletionStream). They differ in what they ask for and where acceptance comes from: SGLang's
per-request fields and its generation-tokens / verify-calls counters, vLLM's spec_decode counters read like
`vllm bench serve` (prometheus.spec_decode_figures) and, 0.30+, its per-request spec metrics.

Built for throughput on one core: request bodies encoded before the clock starts, the streaming POSTs sent
over a pool of keep-alive connections by the small HTTP/1.1 client of transport.py, which hands each piece the
socket delivers straight to the stream (one timestamp per read, no task wake-up per chunk), and for the native
backend only the `completion_tokens` integer of each cumulative chunk read, the small `meta_info` object decoded
once at the end, never the growing text. aiohttp serves only the one-off GET /v1/models.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from . import prometheus, repetition, steady_state
from .metrics import RequestRecord, summarize
from .streams import OpenAICompletionStream, SglangStream, SseReceiver, Stream, StreamError
from .transport import ConnectError, HttpError, HttpPool, parse_base_url

BACKENDS = ("sglang", "sglang-oai", "vllm")
# bench_serving caps the warm-up request's output at 32 tokens.
WARMUP_OUTPUT_LEN_CAP = 32


@dataclass(frozen=True)
class BenchConfig:
    base_url: str
    backend: str = "sglang"
    concurrency: int = 1
    num_prompts: int = 1
    input_len: int = 128
    output_len: int = 128
    seed: int = 1
    warmup_requests: int = 1
    request_timeout: float = 600.0
    vocab_size: int = 32000
    # A sampled prompt set (one JSON object per line: index, text, category, input_len, output_len); None: random
    # ids of input_len, each asking for output_len tokens.
    prompts_file: str | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    # Keep each request's output token ids in the result (the equivalence gate compares them across configs).
    keep_outputs: bool = False
    # The share of the concurrency that must be in flight for the steady-state window (steady_state.py).
    steady_state_ratio: float = steady_state.DEFAULT_RATIO
    # How often the server's gauges are scraped during the measured requests (prometheus.GaugeSampler); 0: never.
    metrics_interval_ms: int = prometheus.DEFAULT_INTERVAL_MS
    # Send those samples on stderr as they come (the worker stores and broadcasts them); the result keeps the rest.
    stream_metrics: bool = False


@dataclass(frozen=True)
class Prompt:
    content: list[int] | str  # token ids, or the text
    input_len: int
    output_len: int
    index: int | None = None
    category: str | None = None


def make_prompts(count: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    """Random token ids; the same seed gives the same prompts on every host and every run."""
    rng = random.Random(seed)
    vocabulary = range(vocab_size)
    return [rng.choices(vocabulary, k=input_len) for _ in range(count)]


def load_prompts(config: BenchConfig) -> list[Prompt]:
    """The prompts to send: the prompt file's, in its order, else random ids."""
    if config.prompts_file is None:
        ids = make_prompts(config.num_prompts, config.input_len, config.vocab_size, config.seed)
        # Indexed like a prompt file's: at temperature 0 the same seed sends every config these same prompts, whose
        # outputs the equivalence gate compares by index.
        return [Prompt(p, config.input_len, config.output_len, index) for index, p in enumerate(ids)]
    prompts = []
    with open(config.prompts_file, encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                item = json.loads(line)
                prompts.append(
                    Prompt(
                        str(item["text"]),
                        int(item["input_len"]),
                        int(item["output_len"]),
                        int(item["index"]),
                        str(item["category"]),
                    )
                )
    if not prompts:
        raise ValueError(f"{config.prompts_file} holds no prompts")
    return prompts


async def send_request(
    pool: HttpPool,
    request: bytes,
    record: RequestRecord,
    make_stream: Callable[[RequestRecord], Stream],
    timeout: float,
) -> None:
    """Run one request (the bytes of pool.request_bytes) to completion, recording its timings or its error in
    record. Never raises."""
    receiver = SseReceiver(make_stream(record), record)
    record.start = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            status, error_body = await pool.send(request, receiver)
        if status != 200:
            detail = error_body.decode("utf-8", "replace").strip()
            record.error = f"HTTP {status}: {detail[:200]}"
            return
        receiver.end_of_body()
    except ConnectError as exc:
        record.error = f"cannot connect: {exc}"
        record.unreachable = True
    except TimeoutError:  # before OSError, of which it is a subclass
        record.error = f"timed out after {timeout} s"
    except (HttpError, OSError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    except StreamError as exc:
        record.error = f"stream error: {exc}"
    except ValueError as exc:  # undecodable JSON in a data: line
        record.error = f"bad stream data: {exc}"
    finally:
        if not record.end:
            record.end = time.perf_counter()


def _request_body(config: BenchConfig, prompt: list[int] | str, output_len: int, model: str | None) -> bytes:
    if config.backend == "sglang":
        sampling: dict[str, Any] = {"temperature": config.temperature, "max_new_tokens": output_len, "ignore_eos": True}
        if config.top_p != 1:
            sampling["top_p"] = config.top_p
        key = "text" if isinstance(prompt, str) else "input_ids"
        body: dict[str, Any] = {key: prompt, "sampling_params": sampling, "stream": True}
    else:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": output_len,
            "temperature": config.temperature,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if config.backend == "vllm":
            # What `vllm bench serve` sends to /v1/completions beside the above (reference vllm-interface §7.4).
            body["repetition_penalty"] = 1.0
            if config.keep_outputs:
                # vLLM 0.11+: each chunk's token ids (and the prompt's in the first). Only when outputs are kept:
                # the prompt's ids are a large first chunk to decode, and vLLM before 0.11 logs every request's
                # unknown field.
                body["return_token_ids"] = True
        else:
            # SGLang 0.5.23's per-request spec fields (verify steps, accepted-drafts histogram); ignored before.
            body["return_spec_tokens_details"] = True
        if config.top_p != 1:
            body["top_p"] = config.top_p
    return json.dumps(body, separators=(",", ":")).encode()


async def _served_model(session: aiohttp.ClientSession, base_url: str, client_timeout: aiohttp.ClientTimeout) -> str:
    """The id the OpenAI endpoints expect as "model": the first of GET /v1/models, like bench_serving."""
    async with session.get(f"{base_url}/v1/models", timeout=client_timeout) as response:
        if response.status != 200:
            raise StreamError(f"GET /v1/models answered HTTP {response.status}")
        listing = await response.json()
    try:
        return str(listing["data"][0]["id"])
    except (LookupError, TypeError) as exc:
        raise StreamError(f"GET /v1/models listed no model: {str(listing)[:200]}") from exc


class _Progress:
    """At most one progress line per second on stderr; stdout is reserved for the result."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.finished = 0
        self.failed = 0
        self._last_report = 0.0

    def request_done(self, record: RequestRecord) -> None:
        self.finished += 1
        self.failed += not record.succeeded
        now = time.monotonic()
        if self.finished == self.total or now - self._last_report >= 1.0:
            self._last_report = now
            print(f"benchclient: {self.finished}/{self.total} done, {self.failed} failed", file=sys.stderr)


def _vllm_acceptance(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any]:
    """A vLLM cell's acceptance from the server's counters (prometheus.spec_decode_figures): the raw counts, and the
    pooled accept length, accepted-drafts histogram and position acceptance under the keys the SGLang backends fill.
    The counters' histogram replaces the one summed from the requests' own metrics (0.30+): they count the same
    drafts of a cell the server served alone, and the counters are there on every version."""
    figures = prometheus.spec_decode_figures(before, after)
    if figures["accepted_drafts_histogram"] is None:
        # Per-request histograms (if any) stay, with the position acceptance that follows from them.
        figures.pop("accepted_drafts_histogram")
        figures.pop("position_acceptance")
    return figures


async def run_benchmark(config: BenchConfig) -> tuple[dict[str, Any], int]:
    """Run warm-up then the measured requests; returns the result object and the process exit code.

    ValueError for a base URL that is not http:// (https included)."""
    base_url = config.base_url.rstrip("/")
    host, port, path_prefix = parse_base_url(base_url)
    split_itl = config.backend == "sglang"
    engine = prometheus.ENGINE_METRICS[config.backend]
    make_stream: Callable[[RequestRecord], Stream] = SglangStream if split_itl else OpenAICompletionStream
    path = f"{path_prefix}/generate" if split_itl else f"{path_prefix}/v1/completions"
    timeout = aiohttp.ClientTimeout(total=config.request_timeout)
    prompts = load_prompts(config)
    header: dict[str, Any] = {
        "backend": config.backend,
        "base_url": base_url,
        "concurrency": config.concurrency,
        "num_prompts": config.num_prompts,
        "input_len": config.input_len,
        "output_len": config.output_len,
        "seed": config.seed,
        "temperature": config.temperature,
        "top_p": config.top_p,
    }
    if config.prompts_file is not None:
        header["num_prompts"] = len(prompts)
    model: str | None = None
    if config.backend != "sglang":
        try:
            async with aiohttp.ClientSession() as session:
                model = await _served_model(session, base_url, timeout)
        except (aiohttp.ClientError, TimeoutError, StreamError, ValueError) as exc:
            unreachable = isinstance(exc, aiohttp.ClientConnectorError)
            records = [
                RequestRecord(prompt_len=prompt.input_len, start=0.0, error=f"model lookup failed: {exc}")
                for prompt in prompts
            ]
            result = (
                header
                | summarize(records, duration=0.0, split_itl=False)
                | steady_state.figures(records, config.concurrency)
            )
            return result, 1 if unreachable else 0

    pool = HttpPool(host, port)
    semaphore = asyncio.Semaphore(config.concurrency)

    async def limited(request: bytes, record: RequestRecord, progress: _Progress | None) -> None:
        async with semaphore:
            await send_request(pool, request, record, make_stream, config.request_timeout)
        if progress is not None:
            progress.request_done(record)

    try:
        if config.warmup_requests > 0:
            warmup_len = min(prompts[0].output_len, WARMUP_OUTPUT_LEN_CAP)
            warmup_body = _request_body(config, prompts[0].content, warmup_len, model)
            warmup_request = pool.request_bytes(path, warmup_body)
            warmups = [RequestRecord(prompt_len=prompts[0].input_len, start=0.0) for _ in range(config.warmup_requests)]
            print(f"benchclient: warming up with {len(warmups)} request(s)", file=sys.stderr)
            await asyncio.gather(*(limited(warmup_request, record, None) for record in warmups))
            for record in warmups:
                if not record.succeeded:
                    print(f"benchclient: warm-up request failed: {record.error}", file=sys.stderr)

        requests = [
            pool.request_bytes(path, _request_body(config, prompt.content, prompt.output_len, model))
            for prompt in prompts
        ]
        records = [
            RequestRecord(
                prompt_len=prompt.input_len,
                start=0.0,
                prompt_index=prompt.index,
                category=prompt.category,
                keep_output=config.keep_outputs,
                # Before the clock starts: what the degenerate-benchmark checks read of the prompt as sent.
                prompt_digest=repetition.prompt_digest(prompt.content),
                prompt_repeat_share=repetition.repeat_share(prompt.content),
            )
            for prompt in prompts
        ]
        progress = _Progress(len(records))
        async with aiohttp.ClientSession() as metrics_session:
            # After the warm-up finished.
            counters_before = await prometheus.scrape(metrics_session, base_url, engine)
            sampler = (
                prometheus.GaugeSampler(
                    base_url, config.metrics_interval_ms, stream=config.stream_metrics, engine=engine
                )
                if counters_before and config.metrics_interval_ms
                else contextlib.nullcontext(None)
            )
            async with sampler as gauges:
                started = time.perf_counter()
                await asyncio.gather(
                    *(limited(request, record, progress) for request, record in zip(requests, records, strict=True))
                )
                duration = time.perf_counter() - started
            counters_after = await prometheus.scrape(metrics_session, base_url, engine) if counters_before else None
    finally:
        pool.close()

    result = header | summarize(records, duration=duration, split_itl=split_itl)
    # Over the longest stretch with the concurrency held (steady_state.py), beside the whole-cell figures.
    result |= steady_state.figures(records, config.concurrency, ratio=config.steady_state_ratio)
    if config.backend == "vllm":
        result |= _vllm_acceptance(counters_before, counters_after)
    else:
        result["pooled_accept_length"] = prometheus.pooled_accept_length(counters_before, counters_after)
    result["server_mean_e2e_latency_ms"] = prometheus.server_mean_e2e_latency_ms(
        counters_before, counters_after, engine
    )
    # Last, so each sample's age is taken as the result is written: the worker dates them by when it arrives.
    result["server_metrics"] = gauges.report(time.perf_counter()) if gauges is not None else None
    all_unreachable = all(record.unreachable for record in records)
    return result, 1 if all_unreachable else 0
