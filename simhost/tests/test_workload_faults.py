"""The workload faults through the servers' HTTP APIs (SGLang and vLLM personalities): repetition loops on both arms
or the candidate's only, another prompt template on the candidate, and acceptance that follows how repetitive a
prompt is (simhost/workload.py)."""

from __future__ import annotations

import asyncio
import json
import random
import re
from typing import Any

import aiohttp

from simhost import workload

from .conftest import DRAFT, EAGLE3_2STEP, Server
from .test_vllm_serve import start_vllm, stop

EAGLE3_7STEP = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT,
    "--speculative-num-steps", "7", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8",
]  # fmt: skip
FAST = {"SIMHOST_SPEED": "0"}
VOCAB = 163840


def random_prompts(count: int, length: int = 64, seed: int = 7) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(VOCAB) for _ in range(length)] for _ in range(count)]


async def generate(server: Server, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession(server.base) as http:

        async def one(body: dict[str, Any]) -> dict[str, Any]:
            async with http.post("/generate", json=body) as r:
                assert r.status == 200, await r.text()
                return await r.json()

        return list(await asyncio.gather(*(one(b) for b in bodies)))


def loops_from(ids: list[int], after: int, period: int) -> bool:
    return len(ids) > after + period and all(ids[i] == ids[i - period] for i in range(after, len(ids)))


def ids_bodies(prompts: list[list[int]], tokens: int) -> list[dict[str, Any]]:
    return [{"input_ids": p, "sampling_params": {"max_new_tokens": tokens}} for p in prompts]


async def test_it_loops_the_same_prompts_on_both_arms_and_the_draft_accepts_the_loop(launch):
    env = {**FAST, "SIMHOST_FAULTS": "output_loop"}
    base = launch(env=env)
    spec = launch(*EAGLE3_7STEP, "--decode-log-interval", "5", env=env)
    healthy = launch(*EAGLE3_7STEP, env=FAST)
    for server in (base, spec, healthy):
        server.wait_ready()
    bodies = ids_bodies(random_prompts(16), 400)
    base_out, spec_out, healthy_out = [await generate(s, bodies) for s in (base, spec, healthy)]
    looping = [i for i, out in enumerate(base_out) if loops_from(out["output_ids"], 40, 4)]
    assert 3 <= len(looping) <= 13  # about SIMHOST_LOOP_SHARE = 0.5 of them
    for i in range(len(bodies)):
        # Both arms answer the same tokens: the loop is the workload's, not the draft's.
        assert spec_out[i]["output_ids"] == base_out[i]["output_ids"]
        assert len(base_out[i]["output_ids"]) == 400
        # Before the loop, the healthy server's output.
        assert base_out[i]["output_ids"][:40] == healthy_out[i]["output_ids"][:40]
        if i not in looping:
            assert base_out[i]["output_ids"] == healthy_out[i]["output_ids"]
            assert not loops_from(base_out[i]["output_ids"], 40, 4)
    for i in looping:
        meta, healthy_meta = spec_out[i]["meta_info"], healthy_out[i]["meta_info"]
        # 40 tokens at the healthy rate, then 360 at ~7.8 per verify.
        assert meta["spec_accept_length"] > 5.5 > 3.5 > healthy_meta["spec_accept_length"]
    for i in set(range(len(bodies))) - set(looping):
        assert spec_out[i]["meta_info"]["spec_accept_length"] == healthy_out[i]["meta_info"]["spec_accept_length"]
    # The looping prompts alone: once every request in the batch loops, the log's accept len nears steps + 1.
    mark = len(spec.text())
    await generate(spec, [bodies[i] for i in looping])
    lengths = [float(x) for x in re.findall(r"Decode batch, .*accept len: ([\d.]+),", spec.text()[mark:])]
    assert max(lengths) > 7.5


async def test_it_loops_only_the_candidate_with_output_loop_speculative(launch):
    env = {**FAST, "SIMHOST_FAULTS": "output_loop_speculative", "SIMHOST_LOOP_SHARE": "1", "SIMHOST_LOOP_PERIOD": "3"}
    base, spec = launch(env=env), launch(*EAGLE3_2STEP, env=env)
    base.wait_ready()
    spec.wait_ready()
    bodies = ids_bodies(random_prompts(4), 80)
    base_out, spec_out = await generate(base, bodies), await generate(spec, bodies)
    for b, s in zip(base_out, spec_out, strict=True):
        assert not loops_from(b["output_ids"], 40, 3)
        assert loops_from(s["output_ids"], 40, 3)
        assert s["output_ids"][:40] == b["output_ids"][:40] and s["output_ids"][40:] != b["output_ids"][40:]


async def test_it_counts_another_template_on_the_candidate_only(launch):
    env = {**FAST, "SIMHOST_FAULTS": "template_mismatch"}
    base, spec = launch(env=env), launch(*EAGLE3_2STEP, env=env)
    base.wait_ready()
    spec.wait_ready()
    bodies = ids_bodies(random_prompts(3, length=50), 20)
    base_out, spec_out = await generate(base, bodies), await generate(spec, bodies)
    for b, s in zip(base_out, spec_out, strict=True):
        assert b["meta_info"]["prompt_tokens"] == 50
        assert s["meta_info"]["prompt_tokens"] == 50 + 11
        assert all(x != y for x, y in zip(b["output_ids"], s["output_ids"], strict=True))  # from the first token
    async with aiohttp.ClientSession(spec.base) as http:
        body = {"model": "default", "prompt": "one two three", "max_tokens": 4}
        async with http.post("/v1/completions", json=body) as r:
            usage = (await r.json())["usage"]
    assert usage["prompt_tokens"] == 3 + 11 and usage["total_tokens"] == 3 + 11 + 4
    async with aiohttp.ClientSession(base.base) as http:
        async with http.post("/v1/completions", json=body) as r:
            assert (await r.json())["usage"]["prompt_tokens"] == 3


FILLER = "Please keep this in mind as you read the following passage carefully. " * 30
NATURAL = (
    "The committee met on Tuesday to review the budget for the coming year, and after a long discussion about "
    "the cost of repairs to the old library the members agreed to postpone any decision until the engineers had "
    "finished their survey of the roof, the heating system and the foundations, which had been damaged by floods "
    "in the spring; several members asked whether the town could apply for a grant from the regional fund."
)


def per_token_acceptance(meta: dict[str, Any]) -> float:
    return meta["spec_accept_token_num"] / meta["spec_draft_token_num"]


async def test_acceptance_follows_how_repetitive_the_prompt_is_strongly_for_ngram(launch):
    eagle = launch(*EAGLE3_2STEP, env=FAST)
    ngram = launch("--speculative-algorithm", "NGRAM", env=FAST)
    eagle.wait_ready()
    ngram.wait_ready()
    bodies = [{"text": text, "sampling_params": {"max_new_tokens": 300}} for text in (FILLER, NATURAL)]
    (filler, natural), (ngram_filler, ngram_natural) = await generate(eagle, bodies), await generate(ngram, bodies)
    assert per_token_acceptance(filler["meta_info"]) > 0.95  # ~99%, less the last, truncated step
    assert 0.4 < per_token_acceptance(natural["meta_info"]) < 0.85
    # NGRAM (11 drafts a verify): the filler found again in the prompt, natural text barely.
    assert per_token_acceptance(ngram_filler["meta_info"]) > 0.9
    assert per_token_acceptance(ngram_natural["meta_info"]) < 0.5
    assert ngram_filler["meta_info"]["spec_accept_length"] > 4 * ngram_natural["meta_info"]["spec_accept_length"]


def test_random_ids_and_natural_text_keep_their_acceptance_exactly():
    for ids in random_prompts(50, length=1024):
        assert workload.repetitiveness(ids) == 0.0
    words = NATURAL.split()
    share = workload.repetitiveness([hash(w) for w in words])
    assert workload.repeat_weight(share, "EAGLE3") == 0.0 and workload.repeat_weight(share, "NGRAM") == 0.0
    assert workload.repeat_weight(0.0, "NGRAM") == 0.0
    for p in (0.01, 0.3, 0.62, 0.99):
        assert workload.repeat_p(p, 0.0) == p
    assert workload.repetitiveness(FILLER.split()) > 0.9  # type: ignore[arg-type]
    assert workload.repeat_p(0.62, workload.repeat_weight(0.95, "EAGLE3")) == workload.REPEAT_ACCEPT_P
    # NGRAM feels the same moderate repetition more than EAGLE-3 does.
    assert workload.repeat_weight(0.3, "NGRAM") > workload.repeat_weight(0.3, "EAGLE3") > 0


async def _vllm_complete(server: Server, prompts: list[list[int]], tokens: int) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession(server.base) as http:

        async def one(ids: list[int]) -> dict[str, Any]:
            body = {"model": server.env["MODEL"], "prompt": ids, "max_tokens": tokens}
            async with http.post("/v1/completions", json=body) as r:
                assert r.status == 200, await r.text()
                return await r.json()

        return list(await asyncio.gather(*(one(p) for p in prompts)))


async def test_vllm_loops_accepts_the_loop_and_counts_the_candidates_template(tmp_path):
    from .conftest import TARGET

    env = {
        "SIMHOST_VLLM_VERSION": "0.33.0",
        "SIMHOST_GPU_MEMORY_MIB": "700000",
        "SIMHOST_FAULTS": "output_loop,template_mismatch",
        "SIMHOST_LOOP_SHARE": "1",
        "MODEL": TARGET,
        **FAST,
    }
    spec_config = json.dumps({"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 5})
    base = start_vllm(tmp_path, "-tp", "2", env=env)
    spec = start_vllm(
        tmp_path,
        *["-tp", "2", "--speculative-config", spec_config, "--per-request-spec-decode-metrics", "detailed"],
        env=env,
    )
    try:
        for server in (base, spec):
            server.wait_for(r"^INFO:     Application startup complete\.$")
        prompts = random_prompts(3, length=40)
        base_out, spec_out = await _vllm_complete(base, prompts, 200), await _vllm_complete(spec, prompts, 200)
    finally:
        stop(base)
        stop(spec)
    for b, s in zip(base_out, spec_out, strict=True):
        assert b["usage"]["prompt_tokens"] == 40 and s["usage"]["prompt_tokens"] == 40 + 11
        assert b["choices"][0]["text"] != s["choices"][0]["text"]
        words = b["choices"][0]["text"].split()
        assert words[44:] == words[40:44] * 39  # the last 4 tokens before token 40, over and over
        metrics = s["metrics"]["speculative_decoding"]
        # 39 tokens at the healthy rate, then 160 at ~5.9 per verify (5 drafts).
        assert metrics["mean_acceptance_length"] > 4.0
