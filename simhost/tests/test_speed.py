"""The speed model reproduces the throughputs real users saw (pure), and the server really runs at that speed."""

from __future__ import annotations

import asyncio
import json
import random
import time

import aiohttp
import pytest

from simhost import speed

from .conftest import DRAFT, EAGLE3_2STEP, e2e_histogram

P = speed.SpeedParams()
BASELINE = speed.SpecConfig()
EAGLE3_2 = speed.SpecConfig("EAGLE3", num_steps=2, topk=1, num_draft_tokens=3, overlap=False)
EAGLE3_3 = speed.SpecConfig("EAGLE3", num_steps=3, topk=1, num_draft_tokens=4, overlap=False)
EAGLE3_3STEP = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT,
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
]  # fmt: skip


def test_it_reproduces_the_concurrency_1_throughputs():
    def tput(cfg: speed.SpecConfig, c: int = 1) -> float:
        return speed.expected_output_throughput(P, cfg, 128, 128, c)

    assert tput(BASELINE) == pytest.approx(83, rel=0.01)
    assert tput(EAGLE3_2) == pytest.approx(94, rel=0.01)
    assert tput(EAGLE3_3) == pytest.approx(60, rel=0.01)
    # Speculation's advantage shrinks with concurrency; 3 steps loses clearly at 4.
    gains = [tput(EAGLE3_2, c) / tput(BASELINE, c) for c in (1, 2, 4, 8)]
    assert gains == sorted(gains, reverse=True) and gains[-1] < 1
    assert tput(EAGLE3_3, 4) < 0.8 * tput(BASELINE, 4)
    # Spec v2 (overlap on) saves the scheduling overhead.
    assert tput(speed.SpecConfig("EAGLE3", 2, 1, 3, overlap=True)) > tput(EAGLE3_2)


def test_it_has_a_ground_truth_whose_best_config_changes_with_concurrency():
    def best(c: int) -> tuple[int, int, int] | None:
        truth = {
            (s, k, d): speed.ground_truth(speed.SpecConfig("EAGLE3", s, k, d, overlap=False), c)
            for s in (1, 2, 3, 4)
            for k in (1, 2, 4, 8)
            for d in ((s + 1,) if k == 1 else (2, 3, 4, 6, 8))
        }
        top = max(truth, key=lambda key: truth[key] or 0.0)
        return top if (truth[top] or 0.0) > speed.ground_truth(BASELINE, c) else None  # type: ignore[operator]

    assert best(1)[:1] == (2,) and best(4) == (1, 1, 2) and best(8) is None  # type: ignore[index]
    # The draft tree only pays its width when draft tokens cover its branches; too wide a tree runs out of memory.
    narrow, covered = speed.SpecConfig("EAGLE3", 1, 2, 2), speed.SpecConfig("EAGLE3", 1, 2, 3)
    assert (narrow.branches, covered.branches, speed.SpecConfig("EAGLE3", 2, 1, 3).branches) == (1.0, 2.0, 1.0)
    assert speed.ground_truth(speed.SpecConfig("EAGLE3", 3, 8, 8), 1) is None
    assert speed.ground_truth(speed.SpecConfig("EAGLE3", 3, 8, 8, cuda_graph=False), 1) is not None
    assert speed.ground_truth(EAGLE3_2, 1) == pytest.approx(94, rel=0.01)


def test_it_matches_the_simulated_acceptance_to_the_formula():
    rng = random.Random(1)
    draws = [speed.draw_accepted(rng, 0.62, 2) + 1 for _ in range(50000)]
    assert sum(draws) / len(draws) == pytest.approx(speed.expected_accept_length(0.62, 2), rel=0.01)
    assert speed.expected_iterations(0.0, 0, 127) == 127


def test_it_costs_more_per_step_with_batch_and_without_graphs():
    assert speed.iteration_ms(P, BASELINE, 1) == 12.0
    assert speed.iteration_ms(P, BASELINE, 8) > speed.iteration_ms(P, BASELINE, 1)
    no_graph = speed.SpecConfig(cuda_graph=False)
    assert speed.iteration_ms(P, no_graph, 1) > 1.5 * speed.iteration_ms(P, BASELINE, 1)
    small = speed.SpecConfig(cuda_graph_max_bs=4)
    assert not speed.uses_cuda_graph(small, 8) and speed.uses_cuda_graph(small, 4)


async def _bench(base: str, n: int, input_len: int = 128, output_len: int = 128) -> tuple[float, float, float]:
    """Sequential streaming requests (concurrency 1) like bench_serving: (output tok/s on the wall clock, output tok/s
    on the server's GPU clock, mean accept length)."""
    tokens = 0
    accept = []
    async with aiohttp.ClientSession(base) as http:
        gpu_before, _ = await e2e_histogram(http)
        started = time.monotonic()
        for i in range(n):
            params = {"temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True}
            body = {"input_ids": [i * 1000 + t for t in range(input_len)], "stream": True, "sampling_params": params}
            async with http.post("/generate", json=body) as r:
                last = b""
                async for line in r.content:
                    if line.startswith(b"data: {"):
                        last = line
            meta = json.loads(last[6:])["meta_info"]
            tokens += meta["completion_tokens"]
            accept.append(meta.get("spec_accept_length", 1.0))
        wall = time.monotonic() - started
        gpu = (await e2e_histogram(http))[0] - gpu_before
        return tokens / wall, tokens / gpu, sum(accept) / len(accept)


async def test_it_measures_the_target_throughputs_at_concurrency_1(launch):
    env = {"SIMHOST_SEED": "7", "SIMHOST_ACCEPT_SPREAD": "0"}
    # A GPU each, as on a real host: on one GPU the three race for its memory at start-up.
    servers = [
        launch("--enable-metrics", env={**env, "CUDA_VISIBLE_DEVICES": "0"}),
        launch("--enable-metrics", *EAGLE3_2STEP, env={**env, "CUDA_VISIBLE_DEVICES": "1"}),
        launch("--enable-metrics", *EAGLE3_3STEP, env={**env, "CUDA_VISIBLE_DEVICES": "2"}),
    ]
    for server in servers:
        server.wait_ready()
    results = await asyncio.gather(*(_bench(s.base, 3) for s in servers))
    # The speeds are read on the simulated GPU's clock, which three servers on a loaded 2-core machine cannot slow.
    (_, base, _), (_, two, accept_two), (_, three, _) = results
    assert base == pytest.approx(83, rel=0.05)
    assert two == pytest.approx(94, rel=0.10)
    assert three == pytest.approx(60, rel=0.10)
    assert accept_two == pytest.approx(speed.expected_accept_length(0.62, 2), rel=0.1)
    assert three < base < two
    # And the server really runs at that speed: its wall clock never runs ahead of its GPU's (a loaded CPU can only
    # make it late, and the GPU clock catches up on the next steps).
    for wall, gpu, _ in results:
        assert wall <= gpu * 1.02
