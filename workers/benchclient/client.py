"""The load generator: N concurrent streaming requests against one SGLang server, like bench_serving
with --request-rate inf --max-concurrency N.

Built for throughput on one core: request bodies encoded before the clock starts, the streaming POSTs sent
over a pool of keep-alive connections by the small HTTP/1.1 client of transport.py, which hands each piece the
socket delivers straight to the stream (one timestamp per read, no task wake-up per chunk), and for the native
backend only the `completion_tokens` integer of each cumulative chunk read, the small `meta_info` object decoded
once at the end, never the growing text. aiohttp serves only the one-off GET /v1/models.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from .metrics import RequestRecord, summarize
from .transport import ConnectError, HttpError, HttpPool, parse_base_url

BACKENDS = ("sglang", "sglang-oai")
# bench_serving caps the warm-up request's output at 32 tokens.
WARMUP_OUTPUT_LEN_CAP = 32
_META_INFO_KEY = b'"meta_info"'
_COMPLETION_TOKENS_KEY = b'"completion_tokens":'
# The integer after `"completion_tokens":`; a float or anything else leaves it to the full decode.
_INT_VALUE = re.compile(rb"[ \t\r\n]*([0-9]+)[ \t\r\n]*[,}]")
_JSON_DECODER = json.JSONDecoder()


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


class StreamError(Exception):
    """The server reported an error inside an otherwise successful HTTP response."""


def make_prompts(count: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    """Random token ids; the same seed gives the same prompts on every host and every run."""
    rng = random.Random(seed)
    vocabulary = range(vocab_size)
    return [rng.choices(vocabulary, k=input_len) for _ in range(count)]


def _error_of(event: Any) -> str | None:
    """The message of an error event (`{"error": {...}}`, OpenAI `{"object": "error", ...}`), else None."""
    if not isinstance(event, dict):
        return None
    error = event.get("error")
    if error:
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    if event.get("object") == "error":
        return str(event.get("message") or event)
    return None


def _meta_info_of(line: bytes) -> dict[str, Any] | None:
    """Decode only the `"meta_info": {...}` object of a native chunk; None if it cannot be found that way.

    The cumulative text and output_ids grow with every chunk; decoding them each time would make a stream
    quadratic. `"meta_info"` followed by a quote cannot occur inside a JSON string (its quotes would be
    escaped), and SGLang puts the key last, so the search from the end is short.
    """
    at = line.rfind(_META_INFO_KEY)
    if at < 0:
        return None
    rest = line[at + len(_META_INFO_KEY) :].decode("utf-8", "replace").lstrip()
    if not rest.startswith(":"):
        return None
    try:
        meta_info, _ = _JSON_DECODER.raw_decode(rest[1:].lstrip())
    except ValueError:
        return None
    return meta_info if isinstance(meta_info, dict) else None


class SglangStream:
    """Follows one native /generate stream, whose chunks are cumulative: the new tokens of a chunk are the
    growth of meta_info.completion_tokens."""

    split_itl = True

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.completion_tokens = 0
        # The latest meta_info: decoded already, or still the raw line it is in (decoded by finish only).
        self._last_meta_info: dict[str, Any] | None = None
        self._last_line: bytes | None = None
        self._last_offset = 0

    def feed(self, line: bytes, offset: int, now: float) -> None:
        # Fast path: `"meta_info":` then, inside it, `"completion_tokens":<int>`; only that integer is read.
        # Neither key followed by its quote and colon can occur inside a JSON string (the quotes would be
        # escaped), and SGLang puts meta_info last, so both searches from the end are short.
        at = line.rfind(_META_INFO_KEY)
        if at >= 0 and line.startswith(b":", at + 11):
            key_at = line.rfind(_COMPLETION_TOKENS_KEY, at)
            if key_at >= 0:
                match = _INT_VALUE.match(line, key_at + 20)
                if match is not None:
                    self._last_line = line
                    self._last_offset = offset
                    self._count(int(match.group(1)), now)
                    return
        meta_info = _meta_info_of(line)
        if meta_info is None:
            event = json.loads(line[offset:])
            message = _error_of(event)
            if message is not None:
                raise StreamError(message)
            meta_info = event.get("meta_info") if isinstance(event, dict) else None
            if not isinstance(meta_info, dict):
                return
        completion_tokens = meta_info.get("completion_tokens")
        if isinstance(completion_tokens, int) and not isinstance(completion_tokens, bool):
            self._count(completion_tokens, now)
        self._last_meta_info = meta_info
        self._last_line = None

    def _count(self, completion_tokens: int, now: float) -> None:
        if completion_tokens > self.completion_tokens:
            self.record.chunk_times.append(now)
            self.record.chunk_tokens.append(completion_tokens - self.completion_tokens)
            self.completion_tokens = completion_tokens

    @property
    def last_meta_info(self) -> dict[str, Any] | None:
        """The meta_info of the latest chunk that had one."""
        line = self._last_line
        if line is not None:
            meta_info = _meta_info_of(line)
            if meta_info is None:  # not decodable from the key on: decode the whole event (ValueError if bad)
                event = json.loads(line[self._last_offset :])
                meta_info = event.get("meta_info") if isinstance(event, dict) else None
                if not isinstance(meta_info, dict):
                    raise ValueError("meta_info is not an object")
            self._last_meta_info = meta_info
            self._last_line = None
        return self._last_meta_info

    def finish(self) -> None:
        meta_info = self.last_meta_info or {}
        finish_reason = meta_info.get("finish_reason")
        if isinstance(finish_reason, dict) and finish_reason.get("type") == "abort":
            raise StreamError(f"aborted: {finish_reason.get('message') or finish_reason}")
        self.record.output_len = self.completion_tokens
        verify_ct = meta_info.get("spec_verify_ct")
        if isinstance(verify_ct, int):
            self.record.spec_verify_ct = verify_ct


class OpenAICompletionStream:
    """Follows one /v1/completions stream: text deltas per chunk, the token count only in the usage chunk."""

    split_itl = False

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.usage_completion_tokens: int | None = None

    def feed(self, line: bytes, offset: int, now: float) -> None:
        event = json.loads(line[offset:])
        message = _error_of(event)
        if message is not None:
            raise StreamError(message)
        if not isinstance(event, dict):
            return
        for choice in event.get("choices") or ():
            if isinstance(choice, dict) and choice.get("text"):
                self.record.chunk_times.append(now)
                self.record.chunk_tokens.append(1)
                break
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_completion_tokens = usage["completion_tokens"]

    def finish(self) -> None:
        if self.usage_completion_tokens is not None:
            self.record.output_len = self.usage_completion_tokens
        else:
            # A server that ignores include_usage: one token per text chunk is the best remaining guess.
            self.record.output_len = len(self.record.chunk_times)


Stream = SglangStream | OpenAICompletionStream


def feed_sse(stream: Stream, lines: list[bytes], now: float) -> bool:
    """Hand the JSON `data:` lines among lines to stream; True once `data: [DONE]` has been seen.

    The line is passed whole with the offset of its JSON: slicing off `data: ` would copy the growing
    cumulative chunk once more for nothing.
    """
    for line in lines:
        if line.startswith(b"data: {"):
            stream.feed(line, 6, now)
        elif line.startswith(b"data:{"):
            stream.feed(line, 5, now)
        elif line.startswith(b"data:") and line[5:].strip() == b"[DONE]":
            return True
        # Anything else is a blank separator, a ":" comment or an event:/id: field.
    return False


class SseLineSplitter:
    """Turns the pieces a socket delivers into whole lines, keeping a partial last line for the next piece."""

    def __init__(self) -> None:
        self._partial = b""

    def split(self, piece: bytes) -> list[bytes]:
        if self._partial:
            piece = self._partial + piece
        lines = piece.split(b"\n")
        self._partial = lines.pop()
        return lines

    def rest(self) -> list[bytes]:
        partial, self._partial = self._partial, b""
        return [partial] if partial else []


class SseReceiver:
    """The body sink of one streaming request: splits the pieces into lines, feeds the stream, and notes the
    time of `data: [DONE]` as the request's end. Pieces after [DONE] are ignored (the transport still reads
    the body to its end so the connection can be reused)."""

    __slots__ = ("done", "partial", "record", "stream")

    def __init__(self, stream: Stream, record: RequestRecord) -> None:
        self.stream = stream
        self.record = record
        self.partial = b""
        self.done = False

    def __call__(self, piece: bytes, now: float) -> None:
        if self.done:
            return
        if self.partial:
            piece = self.partial + piece
        lines = piece.split(b"\n")
        self.partial = lines.pop()
        if feed_sse(self.stream, lines, now):
            self.done = True
            self.record.end = now

    def end_of_body(self) -> None:
        """The body ended; a server that closed the stream without [DONE] still ends the request there."""
        if not self.done:
            self.record.end = time.perf_counter()
            partial, self.partial = self.partial, b""
            if partial:
                feed_sse(self.stream, [partial], self.record.end)
        self.stream.finish()
        if not self.record.chunk_times:
            raise StreamError("the stream ended without any output tokens")


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


def _request_body(config: BenchConfig, prompt: list[int], output_len: int, model: str | None) -> bytes:
    if config.backend == "sglang":
        body: dict[str, Any] = {
            "input_ids": prompt,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True},
            "stream": True,
        }
    else:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": output_len,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
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


async def run_benchmark(config: BenchConfig) -> tuple[dict[str, Any], int]:
    """Run warm-up then the measured requests; returns the result object and the process exit code.

    ValueError for a base URL that is not http:// (https included)."""
    base_url = config.base_url.rstrip("/")
    host, port, path_prefix = parse_base_url(base_url)
    split_itl = config.backend == "sglang"
    make_stream: Callable[[RequestRecord], Stream] = SglangStream if split_itl else OpenAICompletionStream
    path = f"{path_prefix}/generate" if split_itl else f"{path_prefix}/v1/completions"
    timeout = aiohttp.ClientTimeout(total=config.request_timeout)
    prompts = make_prompts(config.num_prompts, config.input_len, config.vocab_size, config.seed)
    header: dict[str, Any] = {
        "backend": config.backend,
        "base_url": base_url,
        "concurrency": config.concurrency,
        "num_prompts": config.num_prompts,
        "input_len": config.input_len,
        "output_len": config.output_len,
        "seed": config.seed,
    }
    model: str | None = None
    if config.backend == "sglang-oai":
        try:
            async with aiohttp.ClientSession() as session:
                model = await _served_model(session, base_url, timeout)
        except (aiohttp.ClientError, TimeoutError, StreamError, ValueError) as exc:
            unreachable = isinstance(exc, aiohttp.ClientConnectorError)
            records = [
                RequestRecord(prompt_len=len(prompt), start=0.0, error=f"model lookup failed: {exc}")
                for prompt in prompts
            ]
            return header | summarize(records, duration=0.0, split_itl=False), 1 if unreachable else 0

    pool = HttpPool(host, port)
    semaphore = asyncio.Semaphore(config.concurrency)

    async def limited(request: bytes, record: RequestRecord, progress: _Progress | None) -> None:
        async with semaphore:
            await send_request(pool, request, record, make_stream, config.request_timeout)
        if progress is not None:
            progress.request_done(record)

    try:
        if config.warmup_requests > 0:
            warmup_body = _request_body(config, prompts[0], min(config.output_len, WARMUP_OUTPUT_LEN_CAP), model)
            warmup_request = pool.request_bytes(path, warmup_body)
            warmups = [RequestRecord(prompt_len=config.input_len, start=0.0) for _ in range(config.warmup_requests)]
            print(f"benchclient: warming up with {len(warmups)} request(s)", file=sys.stderr)
            await asyncio.gather(*(limited(warmup_request, record, None) for record in warmups))
            for record in warmups:
                if not record.succeeded:
                    print(f"benchclient: warm-up request failed: {record.error}", file=sys.stderr)

        requests = [
            pool.request_bytes(path, _request_body(config, prompt, config.output_len, model)) for prompt in prompts
        ]
        records = [RequestRecord(prompt_len=len(prompt), start=0.0) for prompt in prompts]
        progress = _Progress(len(records))
        started = time.perf_counter()
        await asyncio.gather(
            *(limited(request, record, progress) for request, record in zip(requests, records, strict=True))
        )
        duration = time.perf_counter() - started
    finally:
        pool.close()

    result = header | summarize(records, duration=duration, split_itl=split_itl)
    all_unreachable = all(record.unreachable for record in records)
    return result, 1 if all_unreachable else 0
