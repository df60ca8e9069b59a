"""Each speculative request's accepted-drafts histogram (index i: verify steps that accepted exactly i drafts), in
meta_info under its version's name and on the OpenAI endpoints in `sglext.spec_tokens_details` when asked for:
it adds up to the request's verify steps, its accepted drafts and its output tokens, the last step (capped by the
tokens left) included."""

from __future__ import annotations

import json

import aiohttp

from .conftest import EAGLE3_2STEP

FAST = {"SIMHOST_SPEED": "0"}
# Short outputs end on a step whose drafts are cut by the tokens left; 2 steps accept at most 2 drafts.
LENGTHS = (2, 3, 4, 5, 17, 40)


def _check(meta: dict, histogram: list[int], correct: int) -> None:
    assert len(histogram) == 3 and all(isinstance(n, int) and n >= 0 for n in histogram)
    assert sum(histogram) == meta["spec_verify_ct"]
    assert sum(i * n for i, n in enumerate(histogram)) == correct
    # The prefill's token, then per verify step its accepted drafts plus the bonus token.
    tokens = 1 + sum((i + 1) * n for i, n in enumerate(histogram))
    assert meta["completion_tokens"] == tokens
    assert abs(meta["spec_accept_length"] - tokens / sum(histogram)) < 1e-9


async def _generate(http: aiohttp.ClientSession, tokens: int, first: int) -> dict:
    body = {"input_ids": list(range(first, first + 12)), "sampling_params": {"max_new_tokens": tokens}}
    async with http.post("/generate", json=body) as response:
        return (await response.json())["meta_info"]


async def test_the_0_5_23_histogram_adds_up_in_meta_info_and_in_spec_tokens_details(launch):
    server = launch(*EAGLE3_2STEP, env={**FAST, "SIMHOST_SGLANG_VERSION": "0.5.23"})
    server.wait_ready()
    async with aiohttp.ClientSession(server.base) as http:
        for n, tokens in enumerate(LENGTHS):
            meta = await _generate(http, tokens, 100 * n)
            _check(meta, meta["spec_correct_drafts_histogram"], meta["spec_num_correct_drafts"])
            assert "spec_accept_histogram" not in meta

        body = {"model": "m", "prompt": "one two three", "max_tokens": 17}
        async with http.post("/v1/completions", json={**body, "return_spec_tokens_details": True}) as response:
            answer = await response.json()
        async with http.post("/v1/completions", json=body) as response:
            plain = await response.json()
        async with http.post(
            "/v1/completions", json={**body, "return_spec_tokens_details": True, "stream": True}
        ) as response:
            events = [e.removeprefix("data: ") for e in (await response.read()).decode().split("\n\n") if e]

    details = answer["sglext"]["spec_tokens_details"]
    assert {"spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts",
            "spec_verify_ct", "spec_correct_drafts_histogram", "spec_cap_length", "spec_block_accept_length",
            "spec_cap_lens_histogram"} <= set(details)  # fmt: skip
    meta = {**details, "completion_tokens": answer["usage"]["completion_tokens"]}
    _check(meta, details["spec_correct_drafts_histogram"], details["spec_num_correct_drafts"])
    assert "sglext" not in plain  # only when asked for
    chunks = [json.loads(e) for e in events[:-1]]
    finishing = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c for c in chunks if "sglext" in c] == finishing and len(finishing) == 1
    assert finishing[0]["sglext"]["spec_tokens_details"]["spec_verify_ct"] > 0


async def test_the_0_5_9_histogram_is_spec_accept_histogram_and_there_are_no_spec_tokens_details(launch):
    server = launch(*EAGLE3_2STEP, env=FAST)  # the default version
    server.wait_ready()
    async with aiohttp.ClientSession(server.base) as http:
        for n, tokens in enumerate(LENGTHS):
            meta = await _generate(http, tokens, 100 * n)
            _check(meta, meta["spec_accept_histogram"], meta["spec_accept_token_num"])
            assert "spec_correct_drafts_histogram" not in meta
        body = {"model": "m", "prompt": "one two", "max_tokens": 8, "return_spec_tokens_details": True}
        async with http.post("/v1/completions", json=body) as response:
            assert "sglext" not in await response.json()
