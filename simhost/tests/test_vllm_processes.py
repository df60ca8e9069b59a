"""The vLLM personality's processes and failures, end to end: the orphaned EngineCore after SIGKILL of the API
server and the next launch's free-memory error, a dead engine, era A's log shapes, SIGTERM, startup failures."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from simhost import gpu

from .conftest import DRAFT, REPO, TARGET
from .test_vllm_serve import plain, refused, start_vllm, stop

BIG_GPU = {"SIMHOST_GPU_MEMORY_MIB": "700000"}  # TP=1 launches: a GPU the 553 GiB target fits on


def registry(state: Path) -> list[dict]:
    return gpu.entries({"SIMHOST_STATE_DIR": str(state)})


def wait_until(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def titles(pids: list[int]) -> dict[int, str]:
    out = {}
    for pid in pids:
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
    return out


def test_sigkill_of_the_api_server_orphans_the_engine_core_with_its_memory(tmp_path: Path) -> None:
    first = start_vllm(tmp_path, env=BIG_GPU)
    try:
        first.wait_for(r"INFO:     Application startup complete\.", 30)
        held = registry(tmp_path / "state")
        assert [e["name"] for e in held] == ["VLLM::EngineCore"] and held[0]["memory_mib"]["0"] > 600_000
        first.proc.kill()  # SIGKILL, the API server only
        first.proc.wait(5)
        assert refused(first.port)  # the port is freed at once
        time.sleep(0.5)
        left = titles(first.group_pids())
        assert list(left.values()).count("VLLM::EngineCore") == 1  # alive, no parent-death detection
        apps = first.smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
        assert re.fullmatch(r"\d+, VLLM::EngineCore, \d{6}\n", apps)
        # the next launch on that GPU fails its startup check (reference §4.7)
        second = start_vllm(tmp_path, env=BIG_GPU)
        assert second.proc.wait(30) == 1
        text = plain(second.text())
        assert re.search(
            r"^\(EngineCore_DP0 pid=\d+\) ValueError: Free memory on device \(\d+\.\d\d/683\.59 GiB\) on startup is "
            r"less than desired GPU memory utilization \(0\.9, 615\.23 GiB\)\. Decrease GPU memory utilization or "
            r"reduce GPU memory used by other processes\.$",
            text,
            re.M,
        )
        assert re.search(
            r"^\(EngineCore_DP0 pid=\d+\) ERROR .* \[core\.py:\d+\] EngineCore failed to start\.$", text, re.M
        )
        assert re.search(r"^\(EngineCore_DP0 pid=\d+\) Process EngineCore_DP0:$", text, re.M)
        assert text.rstrip().endswith(
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
            "{'EngineCore_DP0': 1}"
        )
        assert [e["name"] for e in registry(tmp_path / "state")] == ["VLLM::EngineCore"]  # only the orphan's
    finally:
        stop(first)  # the whole group: everything freed
    wait_until(lambda: not first.group_pids())
    assert registry(tmp_path / "state") == []


async def test_a_dead_engine_fails_requests_answers_503_and_ends_the_server(tmp_path: Path) -> None:
    faults = {**BIG_GPU, "SIMHOST_FAULTS": "crash_on_first_request"}
    server = start_vllm(tmp_path, "--disable-log-stats", "--enforce-eager", env=faults)
    try:
        server.wait_for(r"Application startup complete\.", 30)
        async with aiohttp.ClientSession(server.base) as http:
            async with http.get("/metrics") as response:
                assert "vllm:" not in await response.text()  # --disable-log-stats: no engine metrics at all
            body = {"model": TARGET, "prompt": "hello there", "max_tokens": 8, "stream": True}
            async with http.post("/v1/completions", json=body) as response:
                raw = (await response.read()).decode()
            async with http.get("/health") as response:
                assert response.status == 503 and await response.read() == b""
            async with http.post("/v1/completions", json={**body, "stream": False}) as response:
                assert response.status == 500
        events = [line for line in raw.split("\n\n") if line]
        assert events[-1] == "data: [DONE]"
        assert json.loads(events[-2][6:])["error"]["message"].startswith("EngineCore encountered an issue.")
        started = time.monotonic()
        assert server.proc.wait(15) == 0
        assert time.monotonic() - started > 3.0  # the watchdog's ~5 s
        text = plain(server.text())
        assert re.search(r"^\(EngineCore_DP0 pid=\d+\) ERROR .* EngineCore encountered a fatal error\.$", text, re.M)
        assert "AttributeError: 'NoneType' object has no attribute 'shape'" in text
        assert re.search(r"^\(APIServer pid=\d+\) ERROR .* AsyncLLM output_handler failed\.$", text, re.M)
        assert "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue." in text
        assert re.search(r"INFO:     Shutting down\n.*INFO:     Finished server process", text, re.S)
        assert "Engine 000:" not in text and "SpecDecoding" not in text
        # --enforce-eager: neither torch.compile nor graph capture
        assert "Cudagraph is disabled under eager mode" in text
        assert "Capturing CUDA graphs" not in text and "torch.compile" not in text and "Graph capturing" not in text
    finally:
        stop(server)
    assert registry(tmp_path / "state") == []


async def test_era_a_lines_format_a_and_a_clean_sigterm(tmp_path: Path) -> None:
    """0.9.2: API server and EngineCore lines bare, TP workers with the cyan `(VllmWorker rank=N pid=P)` prefix;
    an EAGLE3 head served as method "eagle" accepts nothing (as simhost's SGLang does)."""
    config = json.dumps({"method": "eagle", "model": DRAFT, "num_speculative_tokens": 2})
    env = {"SIMHOST_VLLM_VERSION": "0.9.2", **BIG_GPU}
    server = start_vllm(tmp_path, "-tp", "2", "--speculative-config", config, env=env)
    try:
        server.wait_for(r"^INFO:     Application startup complete\.$", 30)
        async with aiohttp.ClientSession(server.base) as http:
            async with http.post("/v1/completions", json={"prompt": "one two", "max_tokens": 9}) as response:
                assert (await response.json())["usage"]["completion_tokens"] == 9
        server.wait_for(r"SpecDecoding metrics: Draft acceptance rate")
        text = server.text()
        assert re.search(
            rf"^INFO [\d -:]+ \[api_server\.py:\d+\] Starting vLLM API server 0 on http://0\.0\.0\.0:{server.port}$",
            text,
            re.M,
        )
        assert re.search(r"^INFO [\d -:]+ \[core\.py:\d+\] Initializing a V1 LLM engine \(v0\.9\.2\)", text, re.M)
        assert re.search(
            r"^\x1b\[1;36m\(VllmWorker rank=1 pid=\d+\)\x1b\[0;0m INFO .* Starting to load model", text, re.M
        )
        assert "Supported_tasks" not in text and "Capturing CUDA graph shapes: 100%" in text
        assert re.search(
            r"^INFO .* \[metrics\.py:\d+\] SpecDecoding metrics: Draft acceptance rate: 0\.0%, Mean acceptance "
            r"length: 1\.00, Accepted: 0 tokens, Drafted: 16 tokens, Per-position acceptance rate: 0\.000, 0\.000$",
            text,
            re.M,
        )
        assert not any(t.startswith("VLLM::") for t in titles(server.group_pids()).values())  # no titles in 0.9.2
        server.signal_group(signal.SIGTERM)
        assert server.proc.wait(15) == 0
        text = server.text()
        assert re.search(r"Shutting down FastAPI HTTP server\.\nINFO:     Shutting down\n", text)
        assert "INFO:     Application shutdown complete." in text
        wait_until(lambda: not server.group_pids())
    finally:
        stop(server)
    assert registry(tmp_path / "state") == []


@pytest.mark.parametrize(
    ("flags", "pattern"),
    [
        (
            ["-tp", "2"],
            r"WorkerProc failed to start\.(.|\n)*torch\.OutOfMemoryError: CUDA out of memory\. Tried to "
            r"allocate [\d.]+ MiB\. GPU 0 has a total capacity of 140\.40 GiB",
        ),
        (
            ["--gpu-memory-utilization", "0.8"],
            r"ValueError: No available memory for the cache blocks\. Try increasing `gpu_memory_utilization` "
            r"when initializing the engine\.",
        ),
        (
            ["--gpu-memory-utilization", "0.825"],
            r"ValueError: To serve at least one request with the models's max seq len \(262144\), \([\d.]+ "
            r"GiB KV cache is needed",
        ),
        (
            ["--gpu-memory-utilization", "0.999"],
            r"capture_model(.|\n)*torch\.OutOfMemoryError: CUDA out of memory",
        ),
    ],
)
def test_startup_failures(tmp_path: Path, flags: list[str], pattern: str) -> None:
    env = {"SIMHOST_LOAD_SECONDS": "0.2", **({} if "-tp" in flags else BIG_GPU)}
    server = start_vllm(tmp_path, *flags, env=env)
    try:
        assert server.proc.wait(30) == 1
        text = plain(server.text())
        assert re.search(pattern, text), text[-3000:]
        assert (
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
            "{'EngineCore_DP0': 1}" in text
        )
        wait_until(lambda: not server.group_pids())
    finally:
        stop(server)
    assert registry(tmp_path / "state") == []


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "simhost.vllm_serve", *argv], env=full_env, capture_output=True, text=True, timeout=30
    )


def test_command_line_errors_exit_before_any_engine() -> None:
    done = _run(TARGET, "--foo", "1")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.endswith("vllm: error: unrecognized arguments: --foo 1\n")
    done = _run(TARGET, env={"SIMHOST_VLLM_VERSION": "0.12.0"})
    assert done.returncode == 2 and "is not a simulated vLLM version" in done.stderr
    eagle3 = json.dumps({"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 3})
    done = _run(TARGET, "-tp", "8", "--speculative-config", eagle3)  # 0.11 refuses kimi_k2 as an eagle3 target
    assert done.returncode == 1
    assert (
        "Value error, Eagle3 is only supported for ['llama', 'qwen', 'minicpm', 'gpt_oss'] models."
        in done.stdout + done.stderr
    )
    assert "Initializing a V1 LLM engine" not in done.stdout
