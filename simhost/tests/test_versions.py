"""SIMHOST_SGLANG_VERSION switches the formats that changed between SGLang versions (reference §1.3, §2, §3)."""

from __future__ import annotations

import re
import signal

import aiohttp
import pytest

from simhost import lines, versions
from simhost.args import resolve

from .conftest import DRAFT, EAGLE3_2STEP, TARGET

TS = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\]"
TS0 = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} TP0\]"
F = r"\d+\.\d{2}"
SPEC = ["--model", TARGET, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT]


def V(text: str) -> versions.Version:
    return versions.Version.parse(text)


def test_it_knows_the_eras_and_rejects_unknown_versions():
    assert [V(v).era for v in ("0.5.3", "0.5.3.post3", "0.5.9", "0.5.12", "0.5.14", "0.5.23")] == list("AABBCC")
    assert versions.current({}).text == "0.5.9"
    with pytest.raises(versions.UnknownVersion, match=r"SIMHOST_SGLANG_VERSION='0\.5\.11' is not a simulated"):
        V("0.5.11")


def test_it_resolves_the_spec_v2_rules_of_each_version():
    def warnings(version: str, *extra: str, env: dict[str, str] | None = None) -> list[str]:
        _, out = resolve([*SPEC, *extra], {"SIMHOST_SGLANG_VERSION": version, **(env or {})})
        return out

    assert warnings("0.5.3") == [  # silent 48-request reset, beta-spec flag era
        "Overlap scheduler is disabled because of using eagle3 and standalone speculative decoding."
    ]
    args, out = resolve([*SPEC], {"SIMHOST_SGLANG_VERSION": "0.5.12"})
    assert out[1] == "Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding."
    assert args.disable_overlap_schedule is False
    assert warnings("0.5.12", env={"SGLANG_ENABLE_SPEC_V2": "0"})[1] == (
        "Spec v1 is used for eagle/eagle3/standalone speculative decoding because SGLANG_ENABLE_SPEC_V2=False."
    )
    assert warnings("0.5.18", "--cuda-graph-max-bs", "16", env={"SGLANG_ENABLE_SPEC_V2": "1"}) == [
        "\033[1;33m'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-max-bs-decode' instead.\033[0m",
        "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting "
        "--max-running-requests.",
        "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker. Use "
        "--disable-overlap-schedule to select the non-overlap (synchronous) path.",
    ]
    args, _ = resolve([*SPEC, "--cuda-graph-max-bs", "16"], {"SIMHOST_SGLANG_VERSION": "0.5.18"})
    assert args.cuda_graph_max_bs_decode == 16 and not hasattr(args, "cuda_graph_max_bs")
    with pytest.raises(SystemExit) as exc:
        resolve([*SPEC, "--cuda-graph-max-bs", "16"], {"SIMHOST_SGLANG_VERSION": "0.5.20"})
    assert exc.value.code == 2


def test_it_formats_batch_lines_per_version():
    def pre(v: str) -> str:
        return lines.prefill(V(v), 1, 6, 0, 0.0, 0, 0, 0.0)

    def dec(v: str) -> str:
        return lines.decode(V(v), 1, 47, 0.0, (2.17, 0.54), True, 2.18, 0)

    tail = "#new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0"
    assert pre("0.5.3") == f"Prefill batch. {tail}, "
    assert pre("0.5.8") == f"Prefill batch, {tail}, "
    assert pre("0.5.9") == f"Prefill batch, {tail}, input throughput (token/s): 0.00, cuda graph: False"
    assert pre("0.5.10") == f"Prefill batch, {tail}, cuda graph: False, input throughput (token/s): 0.00"
    assert pre("0.5.23") == (
        f"Prefill batch, {tail}, #pending-token: 0, cuda graph: False, input throughput (token/s): 0.00"
    )
    body = (
        "#running-req: 1, #token: 47, token usage: 0.00, accept len: 2.17, accept rate: 0.54, cuda graph: True, "
        "gen throughput (token/s): 2.18, #queue-req: 0"
    )
    assert dec("0.5.3") == f"Decode batch. {body}, "
    assert dec("0.5.6") == f"Decode batch, {body}, "
    assert dec("0.5.9") == dec("0.5.23") == f"Decode batch, {body}"
    # accept rate: 0.5.3 over steps+1, 0.5.4-0.5.10 over draft tokens (bonus counted), 0.5.12+ drafts only
    assert V("0.5.3").accept_rate(200, 100, 2, 3) == pytest.approx(2 / 3)
    assert V("0.5.9").accept_rate(200, 100, 3, 4) == pytest.approx(0.5)
    assert V("0.5.12").accept_rate(200, 100, 2, 3) == pytest.approx(0.5)


async def test_era_a_0_5_3(launch):
    server = launch("--tp", "2", *EAGLE3_2STEP, "--decode-log-interval", "5", env={"SIMHOST_SGLANG_VERSION": "0.5.3"})
    server.wait_ready()
    text = server.text()
    assert "Max running requests is reset" not in text
    assert re.search(r"^Overlap scheduler is disabled because of using eagle3 and standalone speculative", text, re.M)
    assert re.search(rf"^{TS0} Init torch distributed ends\. mem usage={F} GB$", text, re.M)
    assert re.search(rf"^{TS0} Load weight end\. type=DeepseekV3ForCausalLM, dtype=torch\.bfloat16, avail", text, re.M)
    assert re.search(rf"^{TS} server_args=ServerArgs\(model_path=", text, re.M)
    assert re.search(rf'{TS} INFO:     127\.0\.0\.1:\d+ - "GET /get_model_info HTTP/1\.1" 200 OK', text)
    assert re.search(rf"^{TS0} Prefill batch\. #new-seq: 1, .*, #queue-req: 0, $", text, re.M)
    async with aiohttp.ClientSession(server.base) as http:
        async with http.get("/server_info") as r:
            assert r.status == 404  # 0.5.6+
        async with http.get("/get_server_info") as r:
            assert (await r.json())["version"] == "0.5.3"
        body = {"input_ids": list(range(20)), "sampling_params": {"max_new_tokens": 30}}
        async with http.post("/generate", json=body) as r:
            meta = (await r.json())["meta_info"]
    assert meta["spec_draft_token_num"] == 2 * meta["spec_verify_ct"]  # num_steps per verify step
    assert "Endpoint '/get_server_info' is deprecated" not in server.text()
    assert re.search(rf"^{TS0} Decode batch\. .*accept len: {F}, accept rate: {F}, .*#queue-req: \d+, $",
                     server.text(), re.M)  # fmt: skip


async def test_era_c_0_5_23(launch):
    server = launch("--tp", "2", *EAGLE3_2STEP, "--decode-log-interval", "5", env={"SIMHOST_SGLANG_VERSION": "0.5.23"})
    server.wait_ready()
    text = server.text()
    assert "Init torch distributed" not in text
    assert re.search(rf"^{TS} Max running requests is reset to 48", text, re.M)  # timestamped from 0.5.12
    assert re.search(rf"^{TS} server_args=\{{'model_path': '", text, re.M)  # dict dump from 0.5.20
    assert re.search(rf"^{TS0} Load weight end\. elapsed={F} s, type=DeepseekV3ForCausalLM, avail mem=", text, re.M)
    assert re.search(rf"^{TS0} KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, KV size: {F} GB$",
                     text, re.M)  # fmt: skip
    for pattern in (
        rf"^{TS0} Capture target verify CUDA graph begin\. backend=full, num_tokens_per_req=3, avail mem={F} GB$",
        rf"^{TS0} Capture target verify CUDA graph end\. bs=\[1, 2, .*, 48\], elapsed={F} s, mem usage={F} GB, "
        rf"avail mem={F} GB\.$",
        rf"^{TS0} Capture draft decode CUDA graph begin\. backend=full, num_tokens_per_req=1, bs=\[1, ",
        rf"^{TS0} Capture draft extend CUDA graph end\. elapsed={F} s, mem usage={F} GB, avail mem={F} GB\.$",
    ):
        assert re.search(pattern, text, re.M), pattern
    assert "Capture cuda graph" not in text
    async with aiohttp.ClientSession(server.base) as http:
        async with http.get("/ready") as r:
            assert r.status == 200 and await r.read() == b""
        async with http.get("/server_info") as r:
            info = await r.json()
        assert info["version"] == "0.5.23" and info["frontend"] == "python" and "cuda_graph_max_bs_decode" in info
        body = {"input_ids": list(range(20)), "sampling_params": {"max_new_tokens": 30}}
        async with http.post("/generate", json=body) as r:
            meta = (await r.json())["meta_info"]
    assert {"spec_num_correct_drafts", "spec_num_proposed_drafts", "num_retractions", "reasoning_tokens"} <= set(meta)
    assert "spec_accept_token_num" not in meta and "total_retractions" not in meta
    assert re.search(rf"^{TS0} Prefill batch, .*#pending-token: 0, cuda graph: False, input throughput", server.text(),
                     re.M)  # fmt: skip


def test_it_refuses_removed_flags_and_unknown_versions(launch):
    server = launch("--cuda-graph-max-bs", "8", env={"SIMHOST_SGLANG_VERSION": "0.5.20"})
    assert server.proc.wait(10) == 2
    assert "error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, " in server.text()
    server = launch(env={"SIMHOST_SGLANG_VERSION": "0.6.0"})
    assert server.proc.wait(10) == 2
    assert "SIMHOST_SGLANG_VERSION='0.6.0' is not a simulated SGLang version; supported: 0.5.3," in server.text()


async def test_it_prints_eagle3_profile_lines(launch):
    env = {"SIMHOST_SGLANG_VERSION": "0.5.12", "EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": "2",
           "SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0"}  # fmt: skip
    server = launch(*EAGLE3_2STEP, env=env)
    server.wait_ready()
    async with aiohttp.ClientSession(server.base) as http:
        body = {"input_ids": list(range(20)), "sampling_params": {"max_new_tokens": 40}}
        async with http.post("/generate", json=body) as r:
            meta = (await r.json())["meta_info"]
    text = server.text()
    assert re.search(r"^Spec v2 is enabled by default", text, re.M) is None  # 0.5.12 warnings carry a timestamp
    profile = re.findall(
        rf"^{TS} EAGLE3 profile: step=(\d+) bs=1 draft: ({F}) ms \(2 steps\) Target verify: ({F}) ms "
        r"accepted: ([0-2])$",
        text,
        re.M,
    )
    steps = [int(p[0]) for p in profile]
    assert steps and all(s % 2 == 0 for s in steps) and len(steps) >= (meta["spec_verify_ct"] - 1) // 2 - 1
    # spec v2 (overlap on): 2 x 1.5 ms draft, forward(3 tokens) = 17.1 ms, no scheduling overhead
    assert {p[1] for p in profile} == {"3.00"} and {p[2] for p in profile} == {"17.10"}
    server.signal_group(signal.SIGTERM)
    assert server.proc.wait(10) == 0
