"""Each fault behaves as documented, and the draft context-length error happens on its own."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time
from pathlib import Path

import aiohttp
import pytest

from simhost import gpu

from .conftest import DRAFT, DRAFT_131K, EAGLE3_2STEP

EAGLE3_131K = [a if a != EAGLE3_2STEP[3] else DRAFT_131K for a in EAGLE3_2STEP]


def _registry(state_dir: Path) -> list[dict]:
    return gpu.entries({"SIMHOST_STATE_DIR": str(state_dir)})


def _wait_gone(server, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while server.group_pids() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_it_zombies_after_loading_weights(launch, state_dir):
    server = launch("--tp", "2", env={"SIMHOST_FAULTS": "zombie"})
    server.wait_for(r"TP0\] Load weight end\.")
    server.wait_for(r"TP1\] Load weight end\.")
    size = len(server.text())
    time.sleep(1.0)
    assert len(server.text()) == size  # the log stopped
    assert server.proc.poll() is None
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", server.port), timeout=1):
        pass
    assert len(_registry(state_dir)) == 2 and all(e["alive"] for e in _registry(state_dir))
    server.signal_group(signal.SIGKILL)
    server.proc.wait(5)
    _wait_gone(server)
    assert _registry(state_dir) == []  # dead pids no longer count


async def test_it_crashes_on_the_first_request(launch, state_dir):
    server = launch(env={"SIMHOST_FAULTS": "crash_on_first_request"})
    server.wait_ready()  # the warm-up request does not trigger it
    async with aiohttp.ClientSession(server.base) as http:
        with pytest.raises(aiohttp.ClientError):
            await http.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 4}})
    assert server.proc.wait(10) == -signal.SIGKILL
    text = server.text()
    assert re.search(r"^\[[\d :-]+\] Scheduler hit an exception: Traceback \(most recent call last\):$", text, re.M)
    assert re.search(r"^AttributeError: 'NoneType' object has no attribute 'shape'$", text, re.M)
    assert re.search(r"^\[[\d :-]+\] SIGQUIT received\. signum=3, frame=.*\. It usually means one child failed\.$",
                     text, re.M)  # fmt: skip
    _wait_gone(server)
    assert server.group_pids() == [] and _registry(state_dir) == []


def test_it_fails_at_start_when_the_draft_context_is_shorter(launch):
    server = launch(*EAGLE3_131K)
    assert server.proc.wait(10) == -signal.SIGKILL
    text = server.text()
    assert re.search(r"^\[[\d :-]+\] Scheduler hit an exception: Traceback \(most recent call last\):$", text, re.M)
    assert "in maybe_init_draft_worker" in text
    assert (
        "\nValueError: Warning: Target model's context_length (262144) is greater than the derived context_length "
        "(131072). This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may "
        "differ from max_position_embeddings in the model's config. To allow overriding this maximum, set the env "
        "var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1\n"
    ) in text
    assert re.search(r"^\[[\d :-]+\] Received sigquit from a child process\. It usually means the child failed\.$",
                     text, re.M)  # fmt: skip
    assert "Uvicorn running" not in text


def test_it_overrides_the_draft_context_with_the_env(launch):
    server = launch(*EAGLE3_131K, env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})
    server.wait_ready()
    text = server.text()
    warning = "] Warning: Target model's context_length (262144) is greater than the derived context_length (131072)"
    assert warning in text
    assert "] Overriding the draft model's max_position_embeddings to 262144." in text
    assert "ValueError" not in text


def test_it_keeps_a_scheduler_alive_through_sigterm(launch, state_dir):
    server = launch("--tp", "2", env={"SIMHOST_FAULTS": "ignore_sigterm", "SIMHOST_FAULT_RANK": "1"})
    server.wait_ready()
    server.signal_group(signal.SIGTERM)
    assert server.proc.wait(10) == 0
    time.sleep(0.5)
    held = _registry(state_dir)
    assert [e["name"] for e in held] == ["sglang::scheduler_TP1"] and held[0]["alive"]
    apps = server.smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
    assert re.fullmatch(rf"{held[0]['pid']}, sglang::scheduler_TP1, \d+\n", apps)
    server.signal_group(signal.SIGKILL)
    _wait_gone(server)
    assert _registry(state_dir) == []


def test_it_leaks_memory_until_a_gpu_reset(launch, state_dir):
    server = launch(env={"SIMHOST_FAULTS": "leak"})
    server.wait_ready()
    server.signal_group(signal.SIGKILL)
    server.proc.wait(5)
    _wait_gone(server)
    assert server.smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits") != ""
    assert server.smi("--query-gpu=memory.used", "--format=csv,noheader,nounits").splitlines()[0] != "0"
    server.smi("--gpu-reset")
    assert server.smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits") == ""


async def test_it_answers_503_for_a_while_when_health_is_flaky(launch):
    server = launch(
        env={"SIMHOST_FAULTS": "health_flaky", "SIMHOST_FLAKY_SECONDS": "1.5", "SIMHOST_HEALTH_POLL_SECONDS": "0.1"}
    )
    server.wait_ready()
    statuses = []
    async with aiohttp.ClientSession(server.base) as http:
        for _ in range(40):
            async with http.get("/health") as r:
                assert await r.read() == b""
                statuses.append(r.status)
            if r.status == 200:
                break
            await asyncio.sleep(0.1)
    assert statuses[0] == 503 and statuses[-1] == 200 and len(statuses) > 5


def test_it_floods_the_log_once_ready(launch):
    # 20,000 lines a second: a rate the writer keeps with a fifth of a core, so a loaded machine cannot starve it;
    # the rate itself is what is checked (100,000 works on a quiet one).
    rate = 20000
    server = launch(env={"SIMHOST_FAULTS": "log_flood", "SIMHOST_FLOOD_LINES_PER_S": str(rate)})
    server.wait_ready()
    started = time.monotonic()
    time.sleep(1.0)
    text = server.text()
    elapsed = time.monotonic() - started  # the lines counted are those written by now, however long reading them takes
    counters = [int(n) for n in re.findall(r"^\[[\d :-]+\] (?:Decode|Prefill) batch \[(\d+)\], ", text, re.M)]
    assert counters == list(range(1, len(counters) + 1))  # whole lines, none lost, in order
    assert 0.6 * rate * elapsed < len(counters) < 1.3 * rate * (elapsed + 0.2)
    assert re.search(r"^\[[\d :-]+\] Prefill batch \[40\], #new-seq: 1, #new-token: 128, ", text, re.M)
    assert re.search(r"^\[[\d :-]+\] Decode batch \[41\], #running-req: 1, #token: 1024, token usage: 0\.00, ",
                     text, re.M)  # fmt: skip


async def test_it_crashes_mid_benchmark(launch, state_dir):
    server = launch(env={"SIMHOST_FAULTS": "crash_mid_benchmark", "SIMHOST_CRASH_AFTER_REQUESTS": "2"})
    server.wait_ready()
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
    async with aiohttp.ClientSession(server.base) as http:
        for _ in range(2):
            async with http.post("/generate", json=body) as r:
                assert r.status == 200
        with pytest.raises(aiohttp.ClientError):
            await http.post("/generate", json=body)
    assert server.proc.wait(10) == -signal.SIGKILL
    text = server.text()
    assert re.search(r"^\[[\d :-]+\] Scheduler hit an exception: Traceback \(most recent call last\):$", text, re.M)
    assert re.search(r"^AttributeError: 'NoneType' object has no attribute 'shape'$", text, re.M)
    assert re.search(r"^\[[\d :-]+\] SIGQUIT received\. signum=3, frame=.*It usually means one child failed\.$",
                     text, re.M)  # fmt: skip
    _wait_gone(server)
    assert _registry(state_dir) == []


async def test_it_throttles_after_a_while(launch):
    # Generous margins: the suite shares two cores with other servers, and "serving time" starts at ready.
    env = {"SIMHOST_THROTTLE_AFTER_S": "3", "SIMHOST_THROTTLE_FACTOR": "3", "SIMHOST_NOISE": "0"}
    server = launch(env=env)
    server.wait_ready()
    body = {"input_ids": list(range(8)), "sampling_params": {"max_new_tokens": 20}}
    async with aiohttp.ClientSession(server.base) as http:
        async with http.post("/generate", json=body) as r:
            cool = (await r.json())["meta_info"]["e2e_latency"]
        await asyncio.sleep(3.5)
        async with http.post("/generate", json=body) as r:
            hot = (await r.json())["meta_info"]["e2e_latency"]
    assert 2.2 < hot / cool < 3.8


def test_it_runs_out_of_memory_during_graph_capture(launch):
    server = launch(env={"SIMHOST_FAULTS": "oom_capture"})
    assert server.proc.wait(10) == -signal.SIGKILL
    text = server.text()
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in text
    assert "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)" in text


def test_it_runs_out_of_memory_at_a_wide_draft_tree_without_any_fault(launch):
    tree = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "8", "--speculative-num-draft-tokens", "8"]
    server = launch("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT, "--tp", "8", *tree)
    assert server.proc.wait(10) == -signal.SIGKILL
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in server.text()


def test_it_drops_env_vars_from_the_schedulers(launch):
    server = launch(env={"SIMHOST_FAULTS": "env_drop", "NCCL_PROTO": "LL", "OTHER_VAR": "1"})
    server.wait_ready()
    environs = {}
    for pid in server.group_pids():
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        environs[title] = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"NCCL_PROTO=LL" not in environs[b"sglang::scheduler"]
    assert b"OTHER_VAR=1" in environs[b"sglang::scheduler"]
    main = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
    assert b"NCCL_PROTO=LL" in main


def test_it_passes_env_vars_to_the_schedulers_without_faults(launch):
    server = launch(env={"NCCL_PROTO": "LL"})
    server.wait_ready()
    for pid in server.group_pids():
        assert b"NCCL_PROTO=LL" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


def test_it_reads_faults_from_a_file_and_rejects_unknown_ones(launch, tmp_path):
    (tmp_path / "simhost-faults").write_text("# faults for this run\nzombie\n")
    server = launch()
    server.wait_for(r"Load weight end")
    time.sleep(0.5)
    assert "Uvicorn running" not in server.text()
    (tmp_path / "simhost-faults").unlink()
    server = launch(env={"SIMHOST_FAULTS": "zombi"})
    assert server.proc.wait(10) == 2
    assert "unknown simhost fault(s): zombi" in server.text()


async def test_it_rejects_generations_but_stays_healthy(launch):
    server = launch(env={"SIMHOST_FAULTS": "reject_requests"})
    server.wait_ready()
    body = {"input_ids": list(range(8)), "sampling_params": {"max_new_tokens": 4}}
    async with aiohttp.ClientSession(server.base) as http:
        async with http.post("/generate", json=body) as r:
            assert r.status == 500
            assert "generation failed" in (await r.json())["message"]
        async with http.get("/health") as r:
            assert r.status == 200
    assert server.proc.poll() is None


async def test_it_accepts_nothing_when_an_eagle3_draft_is_served_as_eagle(launch):
    eagle = [a if a != "EAGLE3" else "EAGLE" for a in EAGLE3_2STEP]
    server = launch(*eagle, "--enable-metrics", "--decode-log-interval", "5", env={"SIMHOST_SPEED": "0"})
    server.wait_ready()
    body = {"input_ids": list(range(20)), "sampling_params": {"max_new_tokens": 30}}
    async with aiohttp.ClientSession(server.base) as http:

        async def generate(i: int) -> dict:
            async with http.post("/generate", json={**body, "input_ids": list(range(i, i + 20))}) as r:
                assert r.status == 200
                return (await r.json())["meta_info"]

        metas = await asyncio.gather(*(generate(i) for i in range(4)))
        async with http.get("/get_server_info") as r:
            info = await r.json()
        async with http.get("/metrics") as r:
            metrics = await r.text()
    # Every request: one token per verify step (the prefill's first token is not a verify), no draft accepted.
    for meta in metas:
        assert meta["spec_accept_token_num"] == 0 and meta["spec_accept_rate"] == 0.0
        assert meta["spec_verify_ct"] == meta["completion_tokens"] - 1 == 29
    assert info["internal_states"][0]["avg_spec_accept_length"] == 1.0
    assert re.search(r'^sglang:spec_accept_length\{.*tp_rank="0"\} 1\.0$', metrics, re.M)
    text = server.text()
    decode = re.findall(r"Decode batch, .*accept len: ([\d.]+), accept rate: ([\d.]+),", text)
    # 0.5.9's accept rate counts the bonus token among the 3 the verify step checks: 1 of 3.
    assert len(decode) >= 5 and set(decode) == {("1.00", "0.33")}
    # Silent, as the real engine: no error, no traceback, no warning.
    assert "Traceback" not in text and not re.search(r"error|warn", text, re.I), text[-3000:]
    assert server.proc.poll() is None


def test_it_tells_an_eagle3_draft_served_as_eagle_from_every_other_pair():
    from simhost import acceptance

    eagle3 = {"architectures": ["LlamaForCausalLMEagle3"]}
    assert acceptance.accepts_nothing("EAGLE", eagle3)
    assert not acceptance.accepts_nothing("EAGLE3", eagle3)
    assert not acceptance.accepts_nothing("EAGLE", {"architectures": ["LlamaForCausalLMEagle"]})
    assert not acceptance.accepts_nothing("EAGLE", None) and not acceptance.accepts_nothing(None, eagle3)
