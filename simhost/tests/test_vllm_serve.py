"""`python -m simhost.vllm_serve` end to end on one shared EAGLE-3 server (vLLM 0.33.0, TP 2 on GPUs the target fits
on): readiness, the OpenAI endpoints, /metrics against the SpecDecoding lines, the processes and their GPU memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from simhost.engine import Request, word_ids
from simhost.ports import free_port
from simhost.vllm import lines

from .conftest import DRAFT, REPO, TARGET, Server

EAGLE3_K3 = ["--speculative-config", json.dumps({"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 3})]
VOCAB = 163840


def start_vllm(tmp: Path, *flags: str, env: dict[str, str] | None = None, model: str = TARGET) -> Server:
    """Launch like specdash does: own session, stdout+stderr to one log file."""
    port = free_port()
    full_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SIMHOST_LOAD_SECONDS": "0.5",
        "SIMHOST_STATE_DIR": str(tmp / "state"),
        "VLLM_LOG_STATS_INTERVAL": "0.5",
        **(env or {}),
    }
    log = tmp / f"vllm-{port}.log"
    argv = [sys.executable, "-m", "simhost.vllm_serve", model, "--port", str(port), *flags]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=tmp, start_new_session=True
        )
    return Server(proc, port, log, full_env)


def stop(server: Server) -> None:
    server.signal_group(signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(5)


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


def expected_text(prompt: str, tokens: int) -> str:
    """What simhost's SGLang personality answers for this prompt (its engine's own output rule)."""
    req = Request(input_ids=word_ids(prompt.split(), VOCAB) or [0], max_new_tokens=tokens)
    req.emit(tokens, VOCAB)
    return req.text


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("vllm")
    server = start_vllm(
        tmp,
        *["-tp", "2", *EAGLE3_K3, "--per-request-spec-decode-metrics", "detailed"],
        # Two ranks of GPUs the target fits on: two worker processes, not eight, on the loaded test machine.
        env={"SIMHOST_VLLM_VERSION": "0.33.0", "SIMHOST_SPEED": "0", "SIMHOST_GPU_MEMORY_MIB": "700000"},
    )
    # Loading: the port is bound but refuses connections.
    server.wait_for(r"Starting to load model")
    assert refused(server.port)
    server.wait_for(r"^INFO:     Application startup complete\.$")
    yield server
    stop(server)


def test_it_refuses_connections_until_uvicorn_is_up_then_answers_200(server: Server) -> None:
    deadline = time.monotonic() + 10
    while refused(server.port) and time.monotonic() < deadline:
        time.sleep(0.05)
    import urllib.request

    with urllib.request.urlopen(f"{server.base}/health", timeout=5) as response:
        assert response.status == 200 and response.read() == b""
    text = plain(server.text())
    order = [
        r"vLLM server version 0\.33\.0, serving model ",
        r"Initializing a V1 LLM engine \(v0\.33\.0\) with config: .*speculative_config=SpeculativeConfig\("
        r"method='eagle3', model='[^']+kimi-k2\.5-sim-eagle3', num_spec_tokens=3\).*max_seq_len=262144.*"
        r"tensor_parallel_size=2",
        r"Loading weights took \d+\.\d\d seconds",
        r"Model loading took \d+(\.\d+)? GiB memory and \d+\.\d{6} seconds",
        r"torch\.compile took \d+\.\d\d s in total",
        r"GPU KV cache size: [\d,]+ tokens, Maximum concurrency for 262,144 tokens per request: \d+\.\d\dx",
        r"Capturing CUDA graphs \(decode, FULL\)",
        r"Graph capturing finished in \d+ secs, took \d+\.\d\d GiB",
        r"init engine \(profile, create kv cache, warmup model\) took \d+\.\d\d s \(compilation: \d+\.\d\d s\)",
        rf"Starting vLLM server on http://0\.0\.0\.0:{server.port}$",
        r"^INFO:     Started server process \[\d+\]$",
        r"^INFO:     Application startup complete\.$",
    ]
    position = 0
    for pattern in order:
        match = re.compile(pattern, re.M).search(text, position)
        assert match, f"{pattern!r} not found in order in:\n{text[-4000:]}"
        position = match.end()
    # 0.31+: the process prefix is the formatter's (vLLM lines only; uvicorn bare) and no colour without a TTY
    assert re.search(r"^\(APIServer pid=\d+\) INFO \d\d-\d\d [\d:]{8} \[api_server\.py:\d+\] ", text, re.M)
    assert re.search(r"^\(EngineCore pid=\d+\) INFO .* Initializing a V1 LLM engine", text, re.M)
    assert re.search(r"^\(Worker_TP0 pid=\d+\) INFO .* Starting to load model", text, re.M)
    assert "\x1b[" not in server.text()


async def test_completions_stream_one_chunk_per_engine_step_with_usage(server: Server) -> None:
    prompt = "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)"
    body = {
        "model": TARGET,
        "prompt": prompt,
        "max_tokens": 40,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with aiohttp.ClientSession(server.base) as http:
        async with http.post("/v1/completions", json=body) as response:
            assert response.status == 200
            raw = (await response.read()).decode()
        async with http.post("/v1/completions", json={**body, "stream": False}) as response:
            whole = await response.json()
    events = [line[6:] for line in raw.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = chunks[-1]
    words = len(prompt.split())
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": words, "total_tokens": words + 40, "completion_tokens": 40}
    content = chunks[:-1]
    assert content[0]["id"].startswith("cmpl-") and content[0]["object"] == "text_completion"
    assert content[0]["usage"] is None and content[0]["choices"][0]["stop_reason"] is None
    assert [c["choices"][0]["finish_reason"] for c in content][-2:] == [None, "length"]
    text = "".join(c["choices"][0]["text"] for c in content)
    assert text == expected_text(prompt, 40) == whole["choices"][0]["text"]
    per_chunk = [len(c["choices"][0]["text"].split()) for c in content]
    assert max(per_chunk) > 1 and all(1 <= n <= 4 for n in per_chunk)  # all tokens a step accepted: 1..K+1
    assert whole["usage"]["completion_tokens"] == 40 and whole["id"].startswith("cmpl-")
    # 0.30+ --per-request-spec-decode-metrics: on the usage chunk when streaming, in the body otherwise
    spec = usage["metrics"]["speculative_decoding"]
    assert spec["num_spec_steps"] == len(content) - 1  # every chunk after the prefill's is one verify step
    assert spec["num_draft_tokens"] == 3 * spec["num_spec_steps"] and spec["num_spec_tokens"] == 3
    assert spec["num_accepted_draft_tokens"] == 39 - spec["num_spec_steps"] == sum(spec["per_step_accepted"])
    assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"] and len(spec["acceptance_histogram"]) == 4
    assert spec["mean_acceptance_length"] == 1 + spec["num_accepted_draft_tokens"] / spec["num_spec_steps"]
    assert whole["metrics"]["speculative_decoding"]["num_spec_tokens"] == 3


async def test_chat_stream_starts_with_the_role_and_ends_with_finish_and_usage(server: Server) -> None:
    body = {
        "model": TARGET,
        "messages": [{"role": "user", "content": "Say something."}],
        "max_completion_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with aiohttp.ClientSession(server.base) as http:
        async with http.post("/v1/chat/completions", json=body) as response:
            raw = (await response.read()).decode()
    chunks = [json.loads(line[6:]) for line in raw.split("\n\n") if line.startswith("data: {")]
    assert chunks[0]["object"] == "chat.completion.chunk" and chunks[0]["id"].startswith("chatcmpl-")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 12
    assert sum(len(c["choices"][0]["delta"]["content"].split()) for c in chunks[1:-1]) == 12


async def test_models_version_and_errors(server: Server) -> None:
    async with aiohttp.ClientSession(server.base) as http:
        async with http.get("/v1/models") as response:
            models = await response.json()
        async with http.get("/version") as response:
            assert await response.json() == {"version": "0.33.0"}
        async with http.post("/v1/completions", json={"model": "nope", "prompt": "hi"}) as response:
            assert response.status == 404
            error = await response.json()
    card = models["data"][0]
    assert models["object"] == "list" and card["id"] == TARGET and card["owned_by"] == "vllm"
    assert card["max_model_len"] == 262144 and card["root"] == TARGET and card["permission"][0]["allow_sampling"]
    assert error == {
        "error": {"message": "The model `nope` does not exist.", "type": "NotFoundError", "param": None, "code": 404}
    }


def _metric(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) :].rsplit(" ", 1)
            out[labels] = float(value)
    return out


async def test_metrics_counters_match_the_spec_decoding_lines(server: Server) -> None:
    async with aiohttp.ClientSession(server.base) as http:
        for i in range(3):
            body = {"model": TARGET, "prompt": f"count {i} to ten", "max_tokens": 30}
            async with http.post("/v1/completions", json=body) as response:
                assert response.status == 200
        await asyncio.sleep(1.2)  # two stats intervals: every observed draft is in a printed line
        async with http.get("/metrics") as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
    spec = [re.search(lines.SPEC_B_RE, line) for line in plain(server.text()).splitlines()]
    spec_lines = [m for m in spec if m]
    assert spec_lines, server.text()[-3000:]
    accepted = sum(int(m["acc"]) for m in spec_lines)
    drafted = sum(int(m["drafted"]) for m in spec_lines)
    labels = f'{{engine="0",model_name="{TARGET}"}}'
    assert _metric(text, "vllm:spec_decode_num_accepted_tokens_total") == {labels: accepted}
    assert _metric(text, "vllm:spec_decode_num_draft_tokens_total") == {labels: drafted}
    drafts = _metric(text, "vllm:spec_decode_num_drafts_total")[labels]
    assert drafted == 3 * drafts
    per_pos = _metric(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total")
    assert sorted(per_pos) == [labels[:-1] + f',position="{i}"}}' for i in range(3)]
    assert sum(per_pos.values()) == accepted
    assert f"# TYPE vllm:spec_decode_num_drafts_created gauge\nvllm:spec_decode_num_drafts_created{labels} 1." in text
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert f"# TYPE {gauge} gauge" in text
    # each printed line's mean acceptance length is 1 + accepted / drafts of its own window
    stats = [re.search(lines.STATS_RE, line) for line in plain(server.text()).splitlines()]
    assert any(m and float(m["g"]) > 0 for m in stats)


def test_processes_titles_environment_and_gpu_memory(server: Server) -> None:
    apps = server.smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
    rows = [row.split(", ") for row in apps.strip().splitlines()]
    assert sorted(name for _, name, _ in rows) == [f"VLLM::Worker_TP{r}" for r in range(2)]
    assert all(int(mib) > 120_000 for _, _, mib in rows)  # ~0.9 x 140 GiB each, plus the graphs
    titles = {}
    for pid in server.group_pids():
        titles[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    assert sum(t == "VLLM::EngineCore" for t in titles.values()) == 1
    assert sum(t.startswith("VLLM::Worker_TP") for t in titles.values()) == 2
    core = next(pid for pid, t in titles.items() if t == "VLLM::EngineCore")
    environ = Path(f"/proc/{core}/environ").read_bytes().split(b"\0")
    assert f"SIMHOST_STATE_DIR={server.env['SIMHOST_STATE_DIR']}".encode() in environ
    assert b"VLLM_WORKER_MULTIPROC_METHOD=spawn" in environ
