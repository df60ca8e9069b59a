"""Per-position acceptance in the benchmark client: each request's accepted-drafts histogram read from its
meta_info (or the OpenAI endpoints' `sglext.spec_tokens_details`), summed per cell and per prompt category, and the
share of verify steps that accepted draft 1, 2, 3 ...; nothing where the server said nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simhost.tests.conftest import EAGLE3_2STEP, launch, state_dir  # noqa: F401  (fixtures)
from workers.benchclient.client import BenchConfig, run_benchmark
from workers.benchclient.metrics import (
    RequestRecord,
    by_category,
    drafts_histogram,
    position_acceptance,
    summarize,
)
from workers.benchclient.streams import OpenAICompletionStream, SglangStream, feed_sse


def _record(histogram: list[int] | None, *, category: str | None = None, error: str | None = None) -> RequestRecord:
    steps = sum(histogram) if histogram else None
    tokens = (steps or 0) + sum(i * n for i, n in enumerate(histogram or []))
    return RequestRecord(
        prompt_len=4,
        start=0.0,
        end=1.0,
        chunk_times=[0.1, 0.9],
        chunk_tokens=[1, max(tokens - 1, 1)],
        output_len=max(tokens, 2),
        spec_verify_ct=steps,
        spec_drafts_histogram=histogram,
        category=category,
        error=error,
    )


def test_it_sums_the_requests_histograms_and_rates_each_position_over_all_verify_steps() -> None:
    records = [_record([2, 3, 5]), _record([1, 0, 9]), _record([9, 9, 9], error="HTTP 500")]

    histogram = drafts_histogram(records)

    assert histogram == [3, 3, 14]  # the failed request is not counted
    # position 1: steps with >= 1 accepted draft; position 2: with >= 2; over the 20 verify steps
    assert position_acceptance(histogram) == pytest.approx([17 / 20, 14 / 20])


def test_it_pads_histograms_of_different_lengths() -> None:
    assert drafts_histogram([_record([1, 1]), _record([0, 0, 2])]) == [1, 1, 2]
    assert position_acceptance([1, 1, 2]) == pytest.approx([0.75, 0.5])


def test_it_gives_none_not_zeros_when_no_request_reported_a_histogram() -> None:
    baseline = RequestRecord(prompt_len=4, start=0.0, end=1.0, chunk_times=[0.5], chunk_tokens=[3], output_len=3)

    assert drafts_histogram([baseline]) is None
    assert drafts_histogram([_record([0, 0, 0])]) is None  # no verify step at all
    assert position_acceptance(None) is None and position_acceptance([0, 0]) is None

    result = summarize([baseline], duration=1.0, split_itl=True)
    assert result["accepted_drafts_histogram"] is None and result["position_acceptance"] is None


def test_the_cell_result_carries_the_histogram_and_the_rates_overall_and_per_category() -> None:
    records = [_record([1, 2, 1], category="code"), _record([3, 1, 0], category="chat"), _record(None, category="x")]

    result = summarize(records, duration=2.0, split_itl=True)

    assert result["accepted_drafts_histogram"] == [4, 3, 1]
    assert result["position_acceptance"] == pytest.approx([4 / 8, 1 / 8])
    categories = result["categories"]
    assert categories["code"]["accepted_drafts_histogram"] == [1, 2, 1]
    assert categories["code"]["position_acceptance"] == pytest.approx([0.75, 0.25])
    assert categories["chat"]["position_acceptance"] == pytest.approx([0.25, 0.0])
    assert categories["x"]["accepted_drafts_histogram"] is None and categories["x"]["position_acceptance"] is None
    assert by_category(records)["code"] == categories["code"]


def _finish_native(meta_info: dict[str, Any]) -> RequestRecord:
    record = RequestRecord(prompt_len=1, start=0.0)
    stream = SglangStream(record)
    chunk = {"text": "a b c", "output_ids": [1, 2, 3], "meta_info": {"completion_tokens": 3, **meta_info}}
    feed_sse(stream, [b"data: " + json.dumps(chunk).encode(), b"data: [DONE]"], now=1.0)
    stream.finish()
    return record


@pytest.mark.parametrize("key", ["spec_correct_drafts_histogram", "spec_accept_histogram"])
def test_it_reads_the_histogram_from_meta_info_under_either_name(key: str) -> None:
    record = _finish_native({"spec_verify_ct": 2, key: [1, 1, 0]})

    assert record.spec_drafts_histogram == [1, 1, 0] and record.spec_verify_ct == 2


@pytest.mark.parametrize("bad", [[1, -1], [1, 2.5], [True, 1], "1,2", [], {"0": 1}, None])
def test_it_ignores_a_histogram_that_is_not_a_list_of_counts(bad: Any) -> None:
    assert _finish_native({"spec_verify_ct": 2, "spec_correct_drafts_histogram": bad}).spec_drafts_histogram is None


def test_it_reads_spec_tokens_details_from_the_openai_stream() -> None:
    record = RequestRecord(prompt_len=1, start=0.0)
    stream = OpenAICompletionStream(record)
    details = {"spec_verify_ct": 2, "spec_num_correct_drafts": 3, "spec_correct_drafts_histogram": [0, 1, 1]}
    lines = [
        b'data: {"choices":[{"index":0,"text":"a b","finish_reason":null}],"usage":null}',
        b'data: {"choices":[{"index":0,"text":" c d e","finish_reason":"length"}],"usage":null,'
        b'"sglext":{"spec_tokens_details":' + json.dumps(details).encode() + b"}}",
        b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":5,"total_tokens":6}}',
        b"data: [DONE]",
    ]

    assert feed_sse(stream, lines, now=1.0)
    stream.finish()

    assert record.spec_verify_ct == 2 and record.spec_drafts_histogram == [0, 1, 1] and record.output_len == 5


def test_an_openai_stream_without_spec_details_says_nothing() -> None:
    record = RequestRecord(prompt_len=1, start=0.0)
    stream = OpenAICompletionStream(record)
    feed_sse(stream, [b'data: {"choices":[{"index":0,"text":"a","finish_reason":"length"}],"usage":null}'], 1.0)
    stream.finish()

    assert record.spec_verify_ct is None and record.spec_drafts_histogram is None


# --- against the simulated host ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sglang", "sglang-oai"])
async def test_the_cell_rates_agree_with_its_accept_length_on_the_simulated_host(launch, backend: str):  # noqa: F811
    server = launch(*EAGLE3_2STEP, env={"SIMHOST_SPEED": "0", "SIMHOST_SGLANG_VERSION": "0.5.23"})
    server.wait_ready()

    config = BenchConfig(base_url=server.base, backend=backend, concurrency=4, num_prompts=12, output_len=33)
    result, code = await run_benchmark(config)

    assert code == 0 and result["completed"] == 12, result
    histogram, rates = result["accepted_drafts_histogram"], result["position_acceptance"]
    assert len(histogram) == 3 and len(rates) == 2 and 1 >= rates[0] >= rates[1] > 0
    steps = sum(histogram)
    # Each request: its prefill token, then per verify step the accepted drafts plus one; summed over the positions
    # the rates are the accepted drafts per verify step.
    assert result["accept_length"] == pytest.approx(1 + sum(rates) + result["completed"] / steps)
