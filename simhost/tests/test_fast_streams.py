"""With the speed model off the engine runs several steps between yields and a stream gets those steps' events
in one send: each step must still have its own event, byte for byte what SGLang's serializer would print."""

from __future__ import annotations

import asyncio
import itertools
import json

import aiohttp

from .conftest import EAGLE3_2STEP

FAST = {"SIMHOST_SPEED": "0", "SIMHOST_FAST_BURST_STEPS": "8"}


def _events(raw: bytes) -> list[str]:
    events = [event for event in raw.decode().split("\n\n") if event]
    assert all(event.startswith("data: ") for event in events)
    return [event.removeprefix("data: ") for event in events]


def _compact(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


async def _generate_stream(http: aiohttp.ClientSession, input_ids: list[int], tokens: int) -> list[str]:
    body = {"input_ids": input_ids, "sampling_params": {"max_new_tokens": tokens}, "stream": True}
    async with http.post("/generate", json=body) as response:
        assert response.status == 200
        return _events(await response.read())


async def test_every_step_gets_its_own_cumulative_event_when_steps_are_sent_in_bursts(launch):
    server = launch(env={**FAST, "SIMHOST_SGLANG_VERSION": "0.5.12"})  # meta_info with reasoning_tokens last
    server.wait_ready()
    async with aiohttp.ClientSession(server.base) as http:
        streams = await asyncio.gather(*(_generate_stream(http, [i, i + 1, i + 2], 40) for i in range(24)))

    for events in streams:
        assert events[-1] == "[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        assert events[:-1] == [_compact(chunk) for chunk in chunks]  # same bytes, key order
        assert [c["meta_info"]["completion_tokens"] for c in chunks] == list(range(1, 41))  # one per step
        final_ids = chunks[-1]["output_ids"]
        for count, chunk in enumerate(chunks, start=1):
            assert chunk["output_ids"] == final_ids[:count]
            assert len(chunk["text"].split()) == count
            assert list(chunk["meta_info"])[-2:] == (
                ["reasoning_tokens", "e2e_latency"] if count == 40 else ["cached_tokens", "reasoning_tokens"]
            )
        assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
        assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 40}


async def test_speculative_steps_and_openai_deltas_survive_bursts(launch):
    server = launch(*EAGLE3_2STEP, env=FAST)
    server.wait_ready()
    messages = [{"role": "user", "content": "tell me about speculative decoding"}]
    async with aiohttp.ClientSession(server.base) as http:
        events = await _generate_stream(http, list(range(30)), 60)
        async with http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 50}) as response:
            whole = (await response.json())["choices"][0]["message"]["content"]
        async with http.post(
            "/v1/chat/completions", json={"messages": messages, "max_tokens": 50, "stream": True}
        ) as response:
            deltas = [json.loads(event) for event in _events(await response.read())[:-1]]

    chunks = [json.loads(event) for event in events[:-1]]
    assert events[:-1] == [_compact(chunk) for chunk in chunks]
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts[0] == 1 and counts[-1] == 60
    assert all(1 <= b - a <= 3 for a, b in itertools.pairwise(counts))  # 2 steps: up to 3 per verify
    assert any(b - a > 1 for a, b in itertools.pairwise(counts))
    assert chunks[-1]["meta_info"]["spec_verify_ct"] == len(chunks) - 1  # the prefill step is not a verify
    assert all("spec_verify_ct" not in c["meta_info"] for c in chunks[:-1])

    pieces = [d["choices"][0]["delta"]["content"] for d in deltas[1:-1]]
    assert all(pieces) and "".join(pieces).lstrip() == whole
    assert deltas[-1]["choices"][0]["finish_reason"] == "length"


async def test_a_request_that_finishes_while_a_step_is_written_gets_one_more_round_for_its_end():
    """The engine can finish a request while the handler's write of an earlier step waits for the socket: that
    write holds neither the last tokens nor `[DONE]`, so the stream must go round once more to send them."""
    from types import SimpleNamespace

    from simhost.http_common import stream_updates

    req = SimpleNamespace(changed=asyncio.Event(), finished=False, abort=lambda: None)
    request = SimpleNamespace(transport=SimpleNamespace(is_closing=lambda: False))
    req.changed.set()  # a step
    finished_as_each_round_began: list[bool] = []

    async def rounds() -> None:
        async for _ in stream_updates(req, request):  # type: ignore[arg-type]
            finished_as_each_round_began.append(req.finished)
            if len(finished_as_each_round_began) == 1:
                await asyncio.sleep(0)  # the write waits; the engine runs its last step meanwhile
                req.finished = True
                req.changed.set()

    await asyncio.wait_for(rounds(), timeout=5)

    assert finished_as_each_round_began == [False, True]
