"""The benchmark client: its arithmetic on hand-computed timings, its SSE parsing, and the real program
run as a subprocess against a small streaming server that answers like SGLang."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.benchclient.client import BenchConfig, make_prompts, run_benchmark, send_request
from workers.benchclient.metrics import (
    RequestRecord,
    max_output_tokens_per_s,
    percentile,
    request_timings,
    summarize,
)
from workers.benchclient.streams import (
    OpenAICompletionStream,
    SglangStream,
    SseLineSplitter,
    SseReceiver,
    StreamError,
    feed_sse,
)
from workers.benchclient.transport import HttpConnection, HttpError, HttpPool, parse_base_url

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


def test_it_reports_each_requests_own_latencies_for_goodput() -> None:
    first = _record(0.0, [(0.1, 1), (0.3, 2), (0.5, 2)], end=0.5, prompt_len=8)
    one_token = _record(0.2, [(0.45, 1)], end=0.45, prompt_len=8)
    failed = RequestRecord(prompt_len=8, start=0.0, end=0.1, error="HTTP 500: boom")

    rows = summarize([first, one_token, failed], duration=2.0, split_itl=True)["requests"]

    # first: ttft 0.1 s, e2e 0.5 s, tpot (0.5 - 0.1) / 4, its four split gaps of 0.1 s each
    assert rows[0]["ttft_ms"] == pytest.approx(100.0) and rows[0]["e2e_latency_ms"] == pytest.approx(500.0)
    assert rows[0]["tpot_ms"] == pytest.approx(100.0) and rows[0]["itl_ms"] == pytest.approx(100.0)
    assert (rows[0]["ok"], rows[0]["output_len"]) == (True, 5)
    # one token: no time per output token, no gap
    assert rows[1]["ttft_ms"] == pytest.approx(250.0) and (rows[1]["tpot_ms"], rows[1]["itl_ms"]) == (None, None)
    assert rows[2]["ok"] is False and rows[2]["ttft_ms"] is None and rows[2]["e2e_latency_ms"] is None


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


# --- the HTTP/1.1 transport -------------------------------------------------------------------------


class _FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def _chunked(pieces: list[bytes], *, extension: bool = False, trailer: bool = False) -> bytes:
    encoded = b"".join(
        b"%x%s\r\n%s\r\n" % (len(piece), b";name=value" if extension else b"", piece) for piece in pieces if piece
    )
    return encoded + b"0\r\n" + (b"X-Trailer: yes\r\n" if trailer else b"") + b"\r\n"


def _exchange_over_pieces(response: bytes, cuts: list[int]) -> tuple[HttpConnection, Any, list[bytes]]:
    """Feed response to a connection in the pieces that cuts make; returns the connection, its future, the body."""
    loop = asyncio.new_event_loop()
    try:
        connection = HttpConnection(loop)
        connection.connection_made(_FakeTransport())
        received: list[bytes] = []
        waiter = connection.start(b"POST / HTTP/1.1\r\n\r\n", lambda piece, now: received.append(piece))
        bounds = [0, *sorted(set(cuts)), len(response)]
        for start, end in itertools.pairwise(bounds):
            if end > start:
                connection.data_received(response[start:end])
        return connection, waiter, received
    finally:
        loop.close()


_CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.binary(min_size=1, max_size=40), max_size=6),
    extension=st.booleans(),
    trailer=st.booleans(),
    data=st.data(),
)
def test_it_decodes_chunked_bodies_cut_anywhere(
    pieces: list[bytes], extension: bool, trailer: bool, data: st.DataObject
) -> None:
    response = _CHUNKED_HEAD + _chunked(pieces, extension=extension, trailer=trailer)
    cuts = data.draw(st.lists(st.integers(min_value=1, max_value=len(response) - 1), max_size=12))

    connection, waiter, received = _exchange_over_pieces(response, cuts)

    assert waiter.done() and waiter.result() == (200, b"")
    assert b"".join(received) == b"".join(pieces)
    assert connection.reusable


def test_it_decodes_a_chunked_response_cut_at_every_byte_boundary() -> None:
    pieces = [b"data: {}\n\n", b"x" * 300, b"\r\n\r\n", b"0"]
    response = _CHUNKED_HEAD + _chunked(pieces, extension=True, trailer=True)
    every_byte = list(range(1, len(response)))

    for cuts in [[cut] for cut in every_byte] + [every_byte]:
        _, waiter, received = _exchange_over_pieces(response, cuts)

        assert waiter.result() == (200, b""), cuts
        assert b"".join(received) == b"".join(pieces), cuts


def test_it_counts_sglang_tokens_through_the_transport_cut_at_every_byte() -> None:
    sse = _sglang_chunk(1) + _sglang_chunk(3) + _sglang_chunk(4, spec_verify_ct=2) + b"data: [DONE]\n\n"
    response = _CHUNKED_HEAD + _chunked([sse[:100], sse[100:250], sse[250:]])

    for cuts in [[cut] for cut in range(1, len(response))] + [list(range(1, len(response)))]:
        record = RequestRecord(prompt_len=1, start=0.0)
        receiver = SseReceiver(SglangStream(record), record)
        loop = asyncio.new_event_loop()
        try:
            connection = HttpConnection(loop)
            connection.connection_made(_FakeTransport())
            waiter = connection.start(b"", receiver)
            bounds = [0, *cuts, len(response)]
            for start, end in itertools.pairwise(bounds):
                connection.data_received(response[start:end])
        finally:
            loop.close()
        receiver.end_of_body()

        assert waiter.result() == (200, b"")
        assert record.chunk_tokens == [1, 2, 1], cuts
        assert record.output_len == 4
        assert record.spec_verify_ct == 2
        assert record.end > 0


@pytest.mark.parametrize(
    ("response", "expected", "reusable"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", (200, b""), True),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi", (200, b""), True),
        (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", (503, b"busy"), True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi", (200, b""), False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", (200, b""), False),
        (b"HTTP/1.1 204 No Content\r\n\r\n", (204, b""), True),
    ],
)
def test_it_reads_content_length_and_interim_answers(
    response: bytes, expected: tuple[int, bytes], reusable: bool
) -> None:
    connection, waiter, _ = _exchange_over_pieces(response, list(range(1, len(response), 3)))

    assert waiter.result() == expected
    assert connection.reusable is reusable


def test_it_reads_a_body_that_ends_with_the_connection() -> None:
    response = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n"
    connection, waiter, received = _exchange_over_pieces(response, [10, 50])
    assert not waiter.done()

    connection.connection_lost(None)

    assert waiter.result() == (200, b"")
    assert b"".join(received) == b"data: 1\n\n"
    assert not connection.reusable


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",  # not a hex size
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nab\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",  # longer than its size
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\nab",
    ],
)
def test_it_fails_a_malformed_response(response: bytes) -> None:
    connection, waiter, _ = _exchange_over_pieces(response, [])

    with pytest.raises(HttpError):
        waiter.result()
    assert connection.closed


def test_it_fails_a_truncated_chunked_body() -> None:
    response = _CHUNKED_HEAD + b'10\r\ndata: {"a"'
    connection, waiter, _ = _exchange_over_pieces(response, [])

    connection.connection_lost(None)

    with pytest.raises(HttpError, match="before the response ended"):
        waiter.result()


def test_it_accepts_only_plain_http_base_urls() -> None:
    assert parse_base_url("http://127.0.0.1:30000") == ("127.0.0.1", 30000, "")
    assert parse_base_url("http://[::1]:8000/prefix/") == ("::1", 8000, "/prefix")
    assert parse_base_url("http://gpu-host") == ("gpu-host", 80, "")
    for bad in ["https://127.0.0.1:30000", "127.0.0.1:30000", "http://", "http://h:99999"]:
        with pytest.raises(ValueError):
            parse_base_url(bad)
    with pytest.raises(ValueError, match="https is not supported"):
        asyncio.run(run_benchmark(BenchConfig(base_url="https://127.0.0.1:1")))


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def _raw_server(handler: Handler) -> AsyncIterator[tuple[HttpPool, list[Any]]]:
    """A scripted TCP server; yields a pool pointed at it and the list of client addresses it accepted."""
    peers: list[Any] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername"))
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = HttpPool("127.0.0.1", port)
    try:
        yield pool, peers
    finally:
        pool.close()
        await asyncio.sleep(0.01)  # let the handlers see the end of their connections
        server.close()
        await server.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    return await reader.readexactly(length)


def _sse_response(tokens: int) -> bytes:
    events = [_sglang_chunk(n) for n in range(1, tokens + 1)] + [b"data: [DONE]\n\n"]
    return _CHUNKED_HEAD + _chunked(events)


async def _send(pool: HttpPool, timeout: float = 5.0) -> RequestRecord:
    record = RequestRecord(prompt_len=1, start=0.0)
    await send_request(pool, pool.request_bytes("/generate", b'{"stream":true}'), record, SglangStream, timeout)
    return record


async def test_it_reuses_keep_alive_connections() -> None:
    async def answer_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            assert await _read_request(reader) == b'{"stream":true}'
            writer.write(_sse_response(3))
            await writer.drain()

    async with _raw_server(answer_forever) as (pool, peers):
        records = [await _send(pool) for _ in range(4)]
        records += await asyncio.gather(*(_send(pool) for _ in range(3)))

    assert [record.error for record in records] == [None] * 7
    assert all(record.chunk_tokens == [1, 1, 1] and record.output_len == 3 for record in records)
    # One connection for the four in a row, two more for three at once.
    assert pool.connections_opened == 3
    assert len(peers) == 3


@pytest.mark.parametrize("wait_before_second", [True, False])
async def test_it_reconnects_when_the_server_closed_a_kept_alive_connection(wait_before_second: bool) -> None:
    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(_sse_response(2))
        await writer.drain()
        # Then close: at once (the client sees it while idle), or on the next request without answering it.
        if not wait_before_second:
            await _read_request(reader)

    async with _raw_server(answer_once) as (pool, peers):
        first = await _send(pool)
        if wait_before_second:
            await asyncio.sleep(0.05)
        second = await _send(pool)

    assert first.error is None and second.error is None
    assert second.output_len == 2
    assert len(peers) == 2


async def test_it_records_a_server_error_status_with_its_body() -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await _read_request(reader)
            body = b'{"error": {"message": "The input is longer than the context length."}}\n'
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    async with _raw_server(refuse) as (pool, peers):
        records = [await _send(pool) for _ in range(2)]

    assert records[0].error == 'HTTP 400: {"error": {"message": "The input is longer than the context length."}}'
    assert not records[0].unreachable
    assert len(peers) == 1  # the error answer left the connection usable


async def test_it_records_a_refused_connection_as_unreachable(unused_tcp_port: int) -> None:
    record = await _send(HttpPool("127.0.0.1", unused_tcp_port))

    assert record.error is not None and record.error.startswith("cannot connect")
    assert record.unreachable


async def test_it_times_out_a_server_that_stops_answering() -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(_CHUNKED_HEAD + _chunked([_sglang_chunk(1)])[:-5])  # a token, then nothing
        await writer.drain()
        await asyncio.sleep(10)

    async with _raw_server(stall) as (pool, _):
        record = await _send(pool, timeout=0.3)

    assert record.error == "timed out after 0.3 s"
    assert not record.unreachable
    assert 0.25 < record.end - record.start < 2.0


async def test_it_fails_a_stream_cut_off_mid_body() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(_sse_response(3)[:-40])
        await writer.drain()

    async with _raw_server(hang_up) as (pool, _):
        record = await _send(pool)

    assert record.error == "HttpError: the server closed the connection before the response ended"


# --- the program against a streaming server ---------------------------------------------------------


@dataclass
class FakeSglang:
    """Streams cumulative SGLang-shaped chunks: tokens_per_chunk new tokens every chunk_interval seconds."""

    tokens_per_chunk: int = 3
    chunk_interval: float = 0.02
    # The gap between a stream's first chunk and its second, when it is not chunk_interval.
    first_gap: float | None = None
    # 1-based call numbers (warm-up included) answered with HTTP 500 / with an error chunk mid-stream.
    http_500_calls: set[int] = field(default_factory=set)
    error_chunk_calls: set[int] = field(default_factory=set)
    calls: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    # What the server itself measured of each stream, by call number (the reference the client's timings are judged
    # against, so a loaded machine, whose sleeps overshoot, moves both alike): when the handler got the request and
    # when it had written the whole stream (time.monotonic), the delay from the request to the first chunk, the gaps
    # after it.
    spans: dict[int, tuple[float, float]] = field(default_factory=dict)
    first_chunk_s: dict[int, float] = field(default_factory=dict)
    gaps_s: dict[int, list[float]] = field(default_factory=dict)
    # The client's (host, port) of each /generate call: which connection carried it.
    peers: list[Any] = field(default_factory=list)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        self.calls += 1
        call = self.calls
        self.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        body = await request.json()
        self.bodies.append(body)
        if call in self.http_500_calls:
            return web.Response(status=500, text="Internal Server Error")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._stream(request, body, call, arrived)
        finally:
            self.in_flight -= 1
            self.spans[call] = (arrived, time.monotonic())

    async def _stream(
        self, request: web.Request, body: dict[str, Any], call: int, arrived: float
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        wanted = body["sampling_params"]["max_new_tokens"]
        produced = verify_steps = 0
        last_write = arrived
        while produced < wanted:
            delay = self.chunk_interval
            if produced == self.tokens_per_chunk and self.first_gap is not None:
                delay = self.first_gap  # before the second chunk
            await asyncio.sleep(delay)
            now = time.monotonic()
            if produced:
                self.gaps_s.setdefault(call, []).append(now - last_write)
            else:
                self.first_chunk_s[call] = now - arrived
            last_write = now
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
    server.chunk_interval = 0.05
    # The second chunk comes half a second after the first: what tells a TTFT read at the first chunk from one read
    # later, seven times the delay a machine at load 8-18 added to the client's reads (72 ms).
    server.first_gap = 0.5

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
    # Judged against what the server measured of the same requests (call 1 is the warm-up), so that what a loaded
    # machine adds to a sleep moves both alike, and by causality: the client starts a request's clock before the
    # server gets it and stops it after the server wrote it, so its timings can only be longer than the server's.
    cell = range(2, 10)
    # The cell's duration covers its requests (8 chunks each, two waves of 4: ~1.7 s) and not the warm-up's: a
    # duration that took the warm-up in would be longer than both together, whatever the load.
    cell_s = max(server.spans[c][1] for c in cell) - min(server.spans[c][0] for c in cell)
    warmup_s = server.spans[1][1] - server.spans[1][0]
    assert cell_s <= result["duration_s"] < cell_s + warmup_s
    assert result["output_throughput"] == pytest.approx(8 * 24 / result["duration_s"])
    assert result["request_throughput"] == pytest.approx(8 / result["duration_s"])
    assert 3.0 < result["concurrency_achieved"] <= 4.0
    # Each gap carries 3 tokens: an ITL of a third of a gap (most gaps are the short ones), a TPOT of the 7 gaps
    # over 23 tokens.
    short_gap_ms = statistics.median(gap for c in cell for gap in server.gaps_s[c][1:]) * 1000
    assert result["median_itl_ms"] == pytest.approx(short_gap_ms / 3, rel=0.3)
    gaps_ms = statistics.mean(sum(server.gaps_s[c]) for c in cell) * 1000
    assert result["mean_tpot_ms"] == pytest.approx(gaps_ms / 23, rel=0.3)
    # The first token is timed at the first chunk: after the server wrote it, and before it wrote the second (a TTFT
    # read at the second chunk would be past that bound on every request, so on the median too).
    first_ms = statistics.median(server.first_chunk_s[c] for c in cell) * 1000
    second_ms = statistics.median(server.first_chunk_s[c] + server.gaps_s[c][0] for c in cell) * 1000
    assert first_ms <= result["median_ttft_ms"] < second_ms
    assert result["accept_length"] == pytest.approx(3.0)
    assert result["max_output_tokens_per_s"] > 0
    # Warm-up first: 16 random ids below the vocabulary size, at most 32 output tokens, then the cell.
    assert server.calls == 9
    assert server.max_in_flight == 4
    # Keep-alive: the warm-up's connection and at most four for the cell, each reused.
    assert len(set(server.peers)) <= 5
    warmup, first = server.bodies[0], server.bodies[1]
    assert warmup["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 24, "ignore_eos": True}
    assert warmup["stream"] is True
    assert len(first["input_ids"]) == 16 and max(first["input_ids"]) < 500
    # What the degenerate-benchmark checks read: distinct random prompts, outputs that count up (no loop).
    rows = result["requests"]
    assert len({row["prompt_digest"] for row in rows}) == 8
    assert all(row["loop_at"] is None and row["loop_unit"] == "tokens" for row in rows)


async def test_it_counts_failed_requests_without_failing_the_run(fake_sglang: tuple[FakeSglang, str]) -> None:
    server, base_url = fake_sglang
    server.http_500_calls = {3}
    server.error_chunk_calls = {5}

    exit_code, stdout, stderr = await _run_client(
        *_cell_args(base_url, concurrency=2, num_prompts=6, output_len=6, warmup_requests="0")
    )

    assert exit_code == 0, stderr
    result = json.loads(stdout)
    # Two connections for six requests, kept alive across the HTTP 500 and reopened after the broken stream.
    assert len(set(server.peers)) <= 3
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


async def test_it_refuses_an_https_base_url() -> None:
    exit_code, stdout, stderr = await _run_client(
        *_cell_args("https://127.0.0.1:30000", concurrency=1, num_prompts=1, output_len=1)
    )

    assert exit_code == 2
    assert stdout == ""
    assert "https is not supported" in stderr


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
            "trt",
        ],
    ],
)
async def test_it_exits_2_for_bad_arguments(bad_args: list[str]) -> None:
    exit_code, stdout, stderr = await _run_client(*bad_args)

    assert exit_code == 2
    assert stdout == ""
    assert "error" in stderr
