"""The benchmark client's per-request facts for the degenerate-benchmark checks: the repetition-loop detector, the
prompt's digest and repetitiveness, and the streams that record them (with the server's count of prompt tokens)."""

from __future__ import annotations

import json
import random

import pytest

from workers.benchclient import repetition
from workers.benchclient.metrics import RequestRecord, request_rows
from workers.benchclient.streams import OpenAICompletionStream, SglangStream, SseReceiver


def test_it_finds_where_a_periodic_tail_begins() -> None:
    head = list(range(100, 140))  # 40 distinct tokens
    looped = head + [1, 2, 3, 4] * 10
    loop = repetition.find_loop(looped)
    assert loop == repetition.Loop(44, 4)  # 40 new tokens, one period of the loop, then its repeats
    # One token repeated to the end is period 1; a loop of the head's own last tokens starts earlier.
    assert repetition.find_loop(head + [7] * 30) == repetition.Loop(41, 1)
    assert repetition.find_loop(head + head[-4:] * 8) == repetition.Loop(40, 4)  # as simhost loops


def test_it_prefers_the_smallest_period_of_a_tail() -> None:
    assert repetition.find_loop([9, 8] + [1, 2] * 20) == repetition.Loop(4, 2)


@pytest.mark.parametrize(
    "tokens",
    [
        list(range(200)),  # nothing repeats
        list(range(40)) + [1, 2, 3, 4] * 5,  # a tail of 20 tokens: too short to call a loop
        list(range(40)) + list(range(500, 540)) * 2,  # period 40: beyond MAX_PERIOD
        list(range(40)) + [1, 2, 3, 4] * 10 + [5],  # the loop was left before the end
        [],
        [3] * 23,
    ],
)
def test_it_finds_no_loop_where_there_is_none(tokens: list[int]) -> None:
    assert repetition.find_loop(tokens) is None


def test_it_finds_a_loop_of_words_and_of_the_longest_period() -> None:
    period = [f"w{i}" for i in range(32)]
    assert repetition.find_loop(["x"] * 0 + list("abcdefgh") + period * 3) == repetition.Loop(40, 32)


def test_natural_text_never_loops() -> None:
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(5000)]
    weights = [1 / (rank + 1) ** 1.1 for rank in range(5000)]  # Zipf, as word frequencies are
    for _ in range(300):
        assert repetition.find_loop(rng.choices(vocabulary, weights, k=512)) is None


def test_it_measures_how_repetitive_a_prompt_is() -> None:
    assert repetition.repeat_share("the quick brown fox jumps over the lazy dog and runs away") == 0.0
    filler = repetition.repeat_share("please repeat this sentence. " * 20)
    assert filler is not None and filler > 0.9
    assert repetition.repeat_share([1, 2, 3, 4, 5, 6, 7, 8]) == 0.0
    assert repetition.repeat_share([1, 2, 3]) is None  # too short to say
    assert repetition.repeat_share(random.Random(1).choices(range(32000), k=1024)) == 0.0


def test_it_digests_the_prompt_as_sent() -> None:
    assert repetition.prompt_digest([1, 2, 3]) == repetition.prompt_digest([1, 2, 3])
    assert repetition.prompt_digest([1, 2, 3]) != repetition.prompt_digest([1, 2, 4])
    assert repetition.prompt_digest("a b") != repetition.prompt_digest("a  b")
    assert len(repetition.prompt_digest("x")) == 16


def _sglang_line(ids: list[int], **meta: object) -> bytes:
    chunk = {"text": " ".join(map(str, ids)), "output_ids": ids, "meta_info": {"completion_tokens": len(ids), **meta}}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def test_the_native_stream_records_the_loop_and_the_prompt_tokens_without_keeping_outputs() -> None:
    ids = list(range(100, 140)) + list(range(136, 140)) * 6
    record = RequestRecord(prompt_len=5, start=0.0)
    receiver = SseReceiver(SglangStream(record), record)
    receiver(_sglang_line(ids[:10], prompt_tokens=17), 0.1)
    receiver(_sglang_line(ids, prompt_tokens=17, finish_reason={"type": "length"}) + b"data: [DONE]\n\n", 0.2)
    receiver.end_of_body()

    assert (record.loop_at, record.loop_period, record.loop_unit) == (40, 4, "tokens")
    assert record.server_prompt_tokens == 17
    assert record.output_ids is None  # not kept: only where the loop begins travels
    row = request_rows([record], split_itl=True)[0]
    assert row["loop_at"] == 40 and row["loop_period"] == 4 and row["prompt_tokens"] == 17
    assert "output_ids" not in row


def _openai_line(text: str, **extra: object) -> bytes:
    event = {"object": "text_completion", "choices": [{"index": 0, "text": text}], **extra}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def test_the_openai_stream_checks_the_words_of_its_text() -> None:
    record = RequestRecord(prompt_len=5, start=0.0)
    receiver = SseReceiver(OpenAICompletionStream(record), record)
    healthy = " ".join(f"w{i}" for i in range(30))
    receiver(_openai_line(" " + healthy), 0.1)
    for _ in range(8):
        receiver(_openai_line(" I think so"), 0.2)
    usage = {"prompt_tokens": 21, "completion_tokens": 54, "total_tokens": 75}
    receiver(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n", 0.3)
    receiver.end_of_body()

    assert (record.loop_at, record.loop_period, record.loop_unit) == (33, 3, "words")
    assert record.server_prompt_tokens == 21


def test_a_healthy_openai_stream_has_no_loop() -> None:
    record = RequestRecord(prompt_len=5, start=0.0)
    receiver = SseReceiver(OpenAICompletionStream(record), record)
    for i in range(60):
        receiver(_openai_line(f" w{i}"), 0.1)
    receiver(b"data: [DONE]\n\n", 0.3)
    receiver.end_of_body()
    assert record.loop_at is None and record.loop_unit == "words" and record.server_prompt_tokens is None
