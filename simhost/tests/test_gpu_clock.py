"""The simulated GPU keeps its own clock: the server's latency histogram reads what the GPU would have taken, however
late the loaded CPU ran the simulation; and a prompt accepts the same drafts on every launch (temperature 0)."""

from __future__ import annotations

import asyncio
import json
import signal

import aiohttp
import pytest

from simhost import speed

from .conftest import EAGLE3_2STEP, e2e_histogram


async def _generate(http: aiohttp.ClientSession, seed: int, output_len: int = 64) -> dict:
    params = {"temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True}
    body = {"input_ids": [seed * 1000 + t for t in range(128)], "stream": True, "sampling_params": params}
    async with http.post("/generate", json=body) as r:
        last = b""
        async for line in r.content:
            if line.startswith(b"data: {"):
                last = line
    return json.loads(last[6:])["meta_info"]


async def test_a_stalled_cpu_stretches_the_wall_clock_latency_but_not_the_servers_histogram(launch):
    server = launch("--enable-metrics", env={"SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0"})
    server.wait_ready()
    model_s = (
        speed.prefill_ms(speed.SpeedParams(), speed.SpecConfig(), 128)
        + 63 * speed.iteration_ms(speed.SpeedParams(), speed.SpecConfig(), 1)
    ) / 1000
    async with aiohttp.ClientSession(server.base) as http:
        before_sum, before_count = await e2e_histogram(http)
        request = asyncio.create_task(_generate(http, 1))
        await asyncio.sleep(0.2)
        server.signal_group(signal.SIGSTOP)  # what a starved CPU does to the simulation, at its worst
        await asyncio.sleep(1.0)
        server.signal_group(signal.SIGCONT)
        meta = await request
        after_sum, after_count = await e2e_histogram(http)

    assert after_count - before_count == 1
    gpu_s = after_sum - before_sum
    assert gpu_s == pytest.approx(model_s, rel=0.05)
    assert meta["e2e_latency"] > gpu_s + 0.3  # the wall clock saw the stall (less what the GPU clock caught up)


async def test_a_prompt_accepts_the_same_drafts_on_every_launch(launch):
    servers = [launch(*EAGLE3_2STEP, env={"CUDA_VISIBLE_DEVICES": str(gpu)}) for gpu in (0, 1)]
    for server in servers:
        server.wait_ready()

    async def accept_lengths(base: str) -> list[float]:
        async with aiohttp.ClientSession(base) as http:
            return [(await _generate(http, seed))["spec_accept_length"] for seed in (1, 2, 3)]

    first, second = await asyncio.gather(*(accept_lengths(s.base) for s in servers))
    assert first == second
    assert len(set(first)) > 1  # each prompt its own, not one draw for all
