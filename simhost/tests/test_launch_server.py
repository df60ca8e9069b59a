"""Conformance of the simulated server with the SGLang 0.5.9 reference: logs, HTTP, process model, shutdown."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from simhost import gpu
from simhost.args import resolve

from .conftest import DRAFT, EAGLE3_2STEP, REPO, TARGET

TS = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\]"
TS0 = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} TP0\]"
F = r"\d+\.\d{2}"

# Rank-0 / main-process lines of the 0.5.9 EAGLE-3 startup (reference §3.2), in order.
STARTUP = [
    r"^Max running requests is reset to 48 for speculative decoding\. You can override this by explicitly "
    r"setting --max-running-requests\.$",
    r"^Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm\. You can "
    r"set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler\. $",
    rf"^{TS} server_args=ServerArgs\(model_path='[^']+', tokenizer_path=",
    rf"^{TS0} Init torch distributed begin\.$",
    rf"^{TS0} Init torch distributed ends\. elapsed={F} s, mem usage={F} GB$",
    rf"^{TS0} Load weight begin\. avail mem={F} GB$",
    r"^Loading safetensors checkpoint shards:   0% Completed \| 0/64 \[00:00<\?, \?it/s\]$",
    r"^Loading safetensors checkpoint shards:  25% Completed \| 16/64 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+it/s\]$",
    r"^Loading safetensors checkpoint shards: 100% Completed \| 64/64 \[",
    rf"^{TS0} Load weight end\. elapsed={F} s, type=DeepseekV3ForCausalLM, dtype=torch\.bfloat16, "
    rf"avail mem={F} GB, mem usage={F} GB\.$",
    rf"^{TS0} Using KV cache dtype: torch\.bfloat16$",
    rf"^{TS0} KV Cache is allocated\. #tokens: \d+, KV size: {F} GB$",
    rf"^{TS0} Memory pool end\. avail mem={F} GB$",
    rf"^{TS0} Capture cuda graph begin\. This can take up to several minutes\. avail mem={F} GB$",
    rf"^{TS0} Capture cuda graph bs \[1, 2, 3, 4, 5, 6, 7, 8, 10, [\d, ]+, 48\]$",
    r"Capturing batches \(bs=1 avail_mem=[\d.]+ GB\): 100%\|",
    rf"^{TS0} Capture cuda graph end\. Time elapsed: {F} s\. mem usage={F} GB\. avail mem={F} GB\.$",
    rf"^{TS0} Init torch distributed begin\.$",
    rf"^{TS0} Load weight begin\. avail mem={F} GB$",
    r"^Loading safetensors checkpoint shards: 100% Completed \| 1/1 \[",
    rf"^{TS0} Load weight end\. elapsed={F} s, type=LlamaForCausalLMEagle3, dtype=torch\.bfloat16, ",
    rf"^{TS0} KV Cache is allocated\. #tokens: \d+, K size: {F} GB, V size: {F} GB$",
    rf"^{TS0} Memory pool end\. avail mem={F} GB$",
    rf"^{TS0} Capture draft cuda graph begin\. This can take up to several minutes\. avail mem={F} GB$",
    rf"^{TS0} Capture draft cuda graph end\. Time elapsed: {F} s\. mem usage={F} GB\. avail mem={F} GB\.$",
    rf"^{TS0} Capture draft extend cuda graph begin\. This can take up to several minutes\. avail mem={F} GB$",
    rf"^{TS0} Capture draft extend cuda graph end\. Time elapsed: {F} s\. mem usage={F} GB\. avail mem={F} GB\.$",
    rf"^{TS0} max_total_num_tokens=\d+, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    rf"max_running_requests=48, context_len=262144, available_gpu_mem={F} GB$",
    rf"^{TS} INFO:     Started server process \[\d+\]$",
    rf"^{TS} INFO:     Waiting for application startup\.$",
    rf"^{TS} INFO:     Application startup complete\.$",
    rf"^{TS} INFO:     Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)$",
    rf'^{TS} INFO:     127\.0\.0\.1:\d+ - "GET /model_info HTTP/1\.1" 200 OK$',
    rf"^{TS0} Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: {F}, #running-req: 0, "
    rf"#queue-req: 0, input throughput \(token/s\): {F}, cuda graph: False$",
    rf'^{TS} INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK$',
    rf"^{TS} The server is fired up and ready to roll!$",
]
DECODE = (
    rf"^{TS0} Decode batch, #running-req: \d+, #token: \d+, token usage: {F}, accept len: {F}, accept rate: {F}, "
    rf"cuda graph: True, gen throughput \(token/s\): {F}, #queue-req: \d+$"
)


def _title(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]


def assert_in_order(text: str, patterns: list[str]) -> None:
    lines = text.splitlines()
    i = 0
    for pattern in patterns:
        while i < len(lines) and not re.search(pattern, lines[i]):
            i += 1
        assert i < len(lines), f"missing (in order) /{pattern}/ in:\n{text}"
        i += 1


@pytest.fixture
def eagle(launch):
    server = launch("--tp", "2", *EAGLE3_2STEP, "--enable-metrics", "--decode-log-interval", "10")
    server.wait_ready()
    return server


async def test_it_prints_the_startup_sequence_and_serves_the_0_5_9_endpoints(eagle):
    assert_in_order(eagle.text(), STARTUP)
    text = eagle.text()
    for line in ("Init torch distributed begin.", "Load weight begin.", "KV Cache is allocated.", "Memory pool end."):
        assert re.search(rf"TP1\] {re.escape(line)}", text)
    assert not re.search(r"TP1\] (Capture cuda graph bs|max_total_num_tokens|Prefill batch)", text)
    dump = re.search(r"server_args=(ServerArgs\(.*\))$", text, re.M)
    assert dump
    for field in ("model_path=", "tp_size=2", "host='127.0.0.1'", "mem_fraction_static=0.891",
                  "max_running_requests=48", "disable_overlap_schedule=True", "speculative_algorithm='EAGLE3'",
                  f"speculative_draft_model_path='{DRAFT}'", "speculative_num_steps=2", "speculative_eagle_topk=1",
                  "speculative_num_draft_tokens=3", "context_length=None", "decode_log_interval=10"):  # fmt: skip
        assert field in dump.group(1)

    async with aiohttp.ClientSession(eagle.base) as http:
        async with http.get("/v1/models") as r:
            models = await r.json()
        assert models["data"][0]["id"] == TARGET
        assert models["data"][0]["max_model_len"] == 262144
        async with http.get("/model_info") as r:
            assert (await r.json())["architectures"] == ["DeepseekV3ForCausalLM"]

        body = {"input_ids": list(range(40)), "sampling_params": {"max_new_tokens": 30, "ignore_eos": True}}
        async with http.post("/generate", json=body) as r:
            result = await r.json()
        meta = result["meta_info"]
        assert meta["completion_tokens"] == 30 == len(result["output_ids"])
        assert meta["prompt_tokens"] == 40
        assert meta["finish_reason"] == {"type": "length", "length": 30}
        for key in ("id", "cached_tokens", "e2e_latency", "spec_accept_rate", "spec_accept_length",
                    "spec_accept_token_num", "spec_draft_token_num", "spec_verify_ct"):  # fmt: skip
            assert key in meta
        assert meta["spec_draft_token_num"] == 2 * meta["spec_verify_ct"]
        assert meta["spec_accept_length"] == pytest.approx(30 / meta["spec_verify_ct"])

        chunks = []
        async with http.post("/generate", json={**body, "text": "a b c", "stream": True}) as r:
            assert r.headers["Content-Type"].startswith("text/event-stream")
            raw = (await r.read()).decode()
        events = [e for e in raw.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
        counts = [c["meta_info"]["completion_tokens"] for c in chunks]
        assert counts == sorted(counts) and counts[-1] == 30  # cumulative
        assert max(b - a for a, b in itertools.pairwise(counts)) > 1  # a verify step emits several
        assert chunks[-1]["meta_info"]["cached_tokens"] == 39  # same input_ids as before: prefix cache hit
        assert "spec_verify_ct" in chunks[-1]["meta_info"] and "spec_verify_ct" not in chunks[0]["meta_info"]

        async with http.post(
            "/v1/completions",
            json={
                "model": TARGET,
                "prompt": "hello there",
                "max_tokens": 12,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ) as r:
            raw = (await r.read()).decode()
        events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
        assert events[-1] == "[DONE]"
        objs = [json.loads(e) for e in events[:-1]]
        assert objs[-1]["choices"] == [] and objs[-1]["usage"] == {  # exclude_none: no prompt_tokens_details
            "prompt_tokens": 2, "total_tokens": 14, "completion_tokens": 12, "reasoning_tokens": 0}  # fmt: skip
        assert objs[-2]["choices"][0]["finish_reason"] == "length"
        assert all(o["object"] == "text_completion" for o in objs)
        async with http.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 5}) as r:
            assert (await r.json())["usage"] == {
                "prompt_tokens": 3,
                "total_tokens": 8,
                "completion_tokens": 5,
                "prompt_tokens_details": None,
                "reasoning_tokens": 0,
            }

        async with http.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True,
                  "stream_options": {"include_usage": True}},
        ) as r:  # fmt: skip
            raw = (await r.read()).decode()
        events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
        assert events[-1] == "[DONE]"
        objs = [json.loads(e) for e in events[:-1]]
        assert all(list(o) == ["id", "object", "created", "model", "choices", "usage"] for o in objs)
        assert all(o["object"] == "chat.completion.chunk" and o["model"] == "m" for o in objs)
        assert objs[0]["choices"][0]["delta"] == {
            "role": "assistant", "content": "", "reasoning_content": None, "tool_calls": None}  # fmt: skip
        assert objs[0]["choices"][0]["finish_reason"] is None and objs[0]["usage"] is None
        assert all(o["choices"][0]["delta"]["role"] is None for o in objs[1:-2])
        assert "".join(o["choices"][0]["delta"]["content"] for o in objs[1:-2]).split().__len__() == 6
        final = objs[-2]["choices"][0]
        assert final["delta"]["content"] is None and final["finish_reason"] == "length"
        assert objs[-1]["choices"] == [] and objs[-1]["usage"] == {
            "prompt_tokens": 4, "total_tokens": 10, "completion_tokens": 6, "prompt_tokens_details": None,
            "reasoning_tokens": 0}  # fmt: skip

        async with http.get("/server_info") as r:
            info = await r.json()
        assert info["version"] == "0.5.9" and info["tp_size"] == 2 and info["speculative_num_draft_tokens"] == 3
        assert 1.0 < info["internal_states"][0]["avg_spec_accept_length"] <= 3.0
        async with http.get("/get_server_info") as r:
            assert r.status == 200
        async with http.get("/metrics") as r:
            assert re.search(r'^sglang:spec_accept_length\{.*tp_rank="0"\} [\d.]+$', await r.text(), re.M)
        async with http.post("/flush_cache") as r:
            assert r.status == 200 and (await r.text()).startswith("Cache flushed.\n")

        started = time.monotonic()
        async with http.get("/health") as r:
            assert r.status == 200 and await r.read() == b""
        assert time.monotonic() - started >= 0.9

    text = eagle.text()
    assert re.search(DECODE, text, re.M)
    assert re.search(rf"{TS0} Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, ", text)
    assert re.search(rf'{TS} INFO:     127\.0\.0\.1:\d+ - "GET /health HTTP/1\.1" 200 OK', text)
    assert "Endpoint '/get_server_info' is deprecated" in text
    assert re.search(rf"{TS0} Cache flushed successfully!", text)

    # Process model: titles, one group, GPU memory in the registry per rank.
    titles = {_title(pid) for pid in eagle.group_pids()}
    assert {b"sglang::scheduler_TP0", b"sglang::scheduler_TP1", b"sglang::detokenizer"} <= titles
    rows = eagle.smi("--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits").splitlines()
    assert rows[2] == "2, 0, 143771" and len(rows) == 8
    used = [int(r.split(", ")[1]) for r in rows[:2]]
    assert all(125000 < u < 135000 for u in used)
    apps = eagle.smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
    assert re.fullmatch(r"(\d+, sglang::scheduler_TP[01], \d+\n){2}", apps)
    assert {int(line.split(", ")[0]) for line in apps.splitlines()} <= set(eagle.group_pids())
    header = eagle.smi("--query-compute-apps=pid,used_memory", "--format=csv").splitlines()[0]
    assert header == "pid, used_gpu_memory [MiB]"


async def test_it_refuses_then_answers_503_then_200(launch):
    server = launch(env={"SIMHOST_LOAD_SECONDS": "1.0", "SIMHOST_SPEED": "0.05"})
    seen: list[str] = []
    deadline = time.monotonic() + 20
    async with aiohttp.ClientSession(server.base) as http:
        while time.monotonic() < deadline and (not seen or seen[-1] != "200"):
            try:
                async with http.get("/health") as r:
                    assert await r.read() == b""
                    seen.append(str(r.status))
            except aiohttp.ClientConnectorError:
                seen.append("refused")
            await _sleep(0.05)
    collapsed = [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]
    assert collapsed == ["refused", "503", "200"], seen
    server.wait_ready()
    assert server.text().index("Uvicorn running") < server.text().index("The server is fired up")


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def test_it_shuts_down_on_sigterm_and_frees_the_gpus(launch, state_dir):
    server = launch("--tp", "2")
    server.wait_ready()
    assert len(gpu.entries({"SIMHOST_STATE_DIR": str(state_dir)})) == 2
    server.signal_group(signal.SIGTERM)
    assert server.proc.wait(10) == 0
    assert_in_order(server.text(), [
        rf"^{TS} SIGTERM received\. signum=15 frame=.*\. Draining requests and shutting down\.\.\.$",
        rf"^{TS} INFO:     Shutting down$",
        rf"^{TS} INFO:     Waiting for application shutdown\.$",
        rf"^{TS} INFO:     Application shutdown complete\.$",
        rf"^{TS} INFO:     Finished server process \[{server.proc.pid}\]$",
    ])  # fmt: skip
    deadline = time.monotonic() + 5
    while server.group_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.group_pids() == []
    assert gpu.entries({"SIMHOST_STATE_DIR": str(state_dir)}) == []
    assert server.smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits") == ""


def test_it_places_ranks_on_cuda_visible_devices(launch):
    server = launch("--tp-size", "2", "--mem-fraction-static", "0.5", env={"CUDA_VISIBLE_DEVICES": "3,5"})
    server.wait_ready()
    used = [int(row.split(", ")[1]) for row in server.smi(
        "--query-gpu=index,memory.used", "--format=csv,noheader,nounits").splitlines()]  # fmt: skip
    assert [i for i, u in enumerate(used) if u] == [3, 5]
    assert 70000 < used[3] < 80000  # about half of 143771 MiB
    assert "GPU 3: NVIDIA H200 (UUID: GPU-" in server.smi("-L")
    assert "sglang::scheduler_TP1" in server.smi()


def test_it_rejects_unknown_flags_with_exit_2(launch):
    server = launch("--no-such-flag")
    assert server.proc.wait(10) == 2
    assert "error: unrecognized arguments: --no-such-flag" in server.text()


def test_it_fails_like_transformers_on_a_missing_model(launch, tmp_path):
    server = launch(model=str(tmp_path / "nope"))
    assert server.proc.wait(10) == 1
    assert "Traceback (most recent call last):" in server.text()
    assert f"OSError: Can't load the configuration of '{tmp_path / 'nope'}'" in server.text()


def test_it_documents_every_flag_and_knob_in_help():
    out = subprocess.run([sys.executable, "-m", "simhost.launch_server", "--help"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    for text in ("--tp-size", "--speculative-eagle-topk", "SIMHOST_LOAD_SECONDS", "SIMHOST_FAULTS", "zombie",
                 "SIMHOST_SPEED", "SIMHOST_GPU_MEMORY_MIB", "SGLANG_ENABLE_SPEC_V2", "SIMHOST_SGLANG_VERSION",
                 "EAGLE3_PROFILE_EVERY", "crash_mid_benchmark", "SIMHOST_THROTTLE_FACTOR",
                 "SIMHOST_CRASH_AFTER_REQUESTS"):  # fmt: skip
        assert text in out


def test_it_resolves_speculative_flags_like_sglang_0_5_9():
    args, warnings = resolve(["--model", TARGET, "--tp", "8", "--speculative-algo", "EAGLE3",
                              "--speculative-draft-model-path", DRAFT, "--mem-fraction", "0.85"], {})  # fmt: skip
    assert (args.tp_size, args.mem_fraction_static) == (8, 0.85)
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    assert args.max_running_requests == 48 and args.disable_overlap_schedule is True
    assert len(warnings) == 2

    args, warnings = resolve(["--model", TARGET, "--speculative-algorithm", "EAGLE3", "--speculative-num-steps",
                              "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5"],
                             {"SGLANG_ENABLE_SPEC_V2": "1"})  # fmt: skip
    assert args.speculative_num_draft_tokens == 3 and args.disable_overlap_schedule is False
    assert warnings[1] == (
        "Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on."
    )
    assert warnings[2] == (
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
    )
    args, _ = resolve(["--model", TARGET, "--tp", "1", "--speculative-algorithm", "EAGLE3"], {})
    assert args.mem_fraction_static == 0.892  # the reference's H200 tp=1 EAGLE3 example
    args, warnings = resolve(["--model", TARGET], {})
    assert args.max_running_requests is None and warnings == [] and args.mem_fraction_static == 0.907


def test_it_keeps_the_port_free_while_loading(launch):
    server = launch(env={"SIMHOST_LOAD_SECONDS": "2"})
    server.wait_for(r"Load weight begin")
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", server.port), timeout=1):
        pass


def test_it_stops_the_schedulers_when_the_launcher_dies(launch, state_dir):
    server = launch("--tp", "2")
    server.wait_ready()
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(5)
    deadline = time.monotonic() + 5
    while server.group_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.group_pids() == []
    assert gpu.entries({"SIMHOST_STATE_DIR": str(state_dir)}) == []


def test_it_exits_when_the_port_is_taken(launch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server = launch("--port", str(busy.getsockname()[1]))  # the last --port wins
        assert server.proc.wait(10) == 1
    assert re.search(r"ERROR:    \[Errno 98\] error while attempting to bind on address \('127\.0\.0\.1', \d+\): "
                     r"address already in use", server.text())  # fmt: skip


async def test_it_answers_503_to_health_while_draining(launch):
    server = launch(env={"SIMHOST_HEALTH_POLL_SECONDS": "0.1"})
    server.wait_ready()
    async with aiohttp.ClientSession(server.base) as http:
        body = {"input_ids": list(range(8)), "sampling_params": {"max_new_tokens": 120}}
        running = asyncio.ensure_future(http.post("/generate", json=body))
        await asyncio.sleep(0.3)
        os.kill(server.proc.pid, signal.SIGTERM)
        await asyncio.sleep(0.1)
        async with http.get("/health") as r:
            assert r.status == 503 and await r.read() == b""
        async with await running as r:
            assert (await r.json())["meta_info"]["completion_tokens"] == 120  # drained, not cut
    assert server.proc.wait(10) == 0
    assert re.search(rf"^{TS} Health check request received during shutdown\. Returning 503\.$", server.text(), re.M)


ENGINE_BUG = """
import asyncio
from simhost import main

async def broken_engine():
    raise ZeroDivisionError("a simulator bug")

async def serve():
    task = asyncio.create_task(broken_engine())
    task.add_done_callback(main.engine_stopped)
    await asyncio.sleep(60)  # the HTTP side, which would go on answering

asyncio.run(serve())
"""


def test_an_engine_that_raises_takes_the_server_down_with_its_traceback():
    """Not a hang with /health still answering: the process tree dies, as SGLang's does when its scheduler raises."""
    done = subprocess.run(
        [sys.executable, "-c", ENGINE_BUG], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "Scheduler hit an exception: Traceback (most recent call last):" in done.stderr
    assert "ZeroDivisionError: a simulator bug" in done.stderr
