"""Each speculative method's personality (simhost/methods.py): the flags each SGLang and vLLM version accepts or
refuses in the engine's words, the drafters' memory in the log, the acceptance and speed models by method, and the
orderings that flip with concurrency on the simulator's own clock (the speed model), not wall time."""

from __future__ import annotations

import json
import re
import signal

import aiohttp
import pytest

from simhost import methods, speed
from simhost.args import resolve
from simhost.engine import Request
from simhost.vllm import args as vargs
from simhost.vllm.engine import engine_args
from simhost.vllm.versions import VllmVersion

from .conftest import DRAFT, EAGLE3_2STEP, MODELS, TARGET

MTP_TARGET = str(MODELS / "kimi-k2.5-sim-mtp")
STANDALONE = str(MODELS / "kimi-k2.5-sim-standalone")
STANDALONE_32K = str(MODELS / "kimi-k2.5-sim-standalone-vocab32k")
DFLASH = str(MODELS / "kimi-k2.5-sim-dflash")
S = speed.SpecConfig
BASELINE = S()
EAGLE3_2 = S("EAGLE3", 2, 1, 3)
MTP_3 = S("EAGLE", 3, 1, 4, method="MTP")
DFLASH_16 = S("DFLASH", 1, 1, 16)
DSPARK_5 = S("DSPARK", 1, 1, 5)
V0523 = {"SIMHOST_SGLANG_VERSION": "0.5.23"}
FAST = {"SIMHOST_SPEED": "0"}


def truth(cfg: speed.SpecConfig, concurrency: int) -> float:
    value = speed.ground_truth(cfg, concurrency)
    assert value is not None
    return value


# ------------------------------------------------------------------------------------------------ speed model


def test_dflash_beats_mtp_alone_and_loses_to_it_at_16_requests():
    assert truth(DFLASH_16, 1) / truth(BASELINE, 1) == pytest.approx(2.5, abs=0.2)  # the 2.5x
    assert truth(DFLASH_16, 1) > 2 * truth(MTP_3, 1)
    assert truth(DFLASH_16, 16) < 0.95 * truth(MTP_3, 16)
    # The flip is the verify cost: DFLASH's block grows with the batch.
    assert speed.iteration_ms(speed.SpeedParams(), DFLASH_16, 16) > 3 * speed.iteration_ms(
        speed.SpeedParams(), DFLASH_16, 1
    )


@pytest.mark.parametrize("concurrency", [1, 2, 4, 8])
def test_dspark_is_4_to_8_percent_slower_than_eagle3_at_low_concurrency(concurrency):
    assert 0.92 <= truth(DSPARK_5, concurrency) / truth(EAGLE3_2, concurrency) <= 0.96


@pytest.mark.parametrize("concurrency", [12, 16, 24, 32])
def test_dspark_is_5_to_20_percent_faster_than_eagle3_at_high_concurrency(concurrency):
    assert 1.05 <= truth(DSPARK_5, concurrency) / truth(EAGLE3_2, concurrency) <= 1.20


def test_eagle3_speed_is_what_it_was():
    # Pinned from the speed model before the methods existed (compared exactly over a grid of configs when they
    # came): baseline ~83, EAGLE3 2 steps ~94 with v1's overlap off, 3 steps ~60.
    assert truth(S("EAGLE3", 2, 1, 3, overlap=False), 1) == pytest.approx(93.9724, abs=1e-4)
    assert truth(S("EAGLE3", 2, 1, 3, overlap=False), 16) == pytest.approx(594.2723, abs=1e-4)
    assert truth(S("EAGLE3", 3, 1, 4, overlap=False), 1) == pytest.approx(59.9729, abs=1e-4)
    assert truth(BASELINE, 1) == pytest.approx(83.0953, abs=1e-4)


def test_per_position_acceptance_by_method():
    p = methods.position_p
    mtp, standalone = methods.PERSONALITIES["MTP"], methods.PERSONALITIES["STANDALONE"]
    assert mtp.base_p is not None and mtp.base_p > 0.85
    # MTP: high at position 1, falling fast; a standalone draft flatter; EAGLE-3 flat, bit for bit.
    assert p(mtp.base_p, mtp.decay, 2) < 0.65 * mtp.base_p
    assert p(0.62, standalone.decay, 2) > 0.95 * 0.62
    assert p(0.62, 1.0, 5) == 0.62
    lengths = {
        kind: speed.expected_accept_length(
            speed.accept_p_of(speed.SpeedParams(), cfg), cfg.max_accepted_drafts, cfg.personality.decay
        )
        for kind, cfg in (("EAGLE3", EAGLE3_2), ("MTP", MTP_3), ("DFLASH", DFLASH_16), ("DSPARK", DSPARK_5))
    }
    assert lengths["DFLASH"] > lengths["DSPARK"] > lengths["MTP"] > lengths["EAGLE3"]


def test_dspark_verifies_whole_blocks_within_budget_and_its_confident_prefix_beyond():
    assert methods.dspark_cap(1, 5, 0.5, bs=8) == 5
    assert methods.dspark_cap(1, 5, 0.5, bs=12) == 2
    assert methods.dspark_cap(1, 5, 0.0, bs=32) == 5  # threshold 0: the full block always


# ------------------------------------------------------------------------------------------------ SGLang flags


def refused(argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as raised:
        resolve(argv, env)
    assert raised.value.code == 2
    return capsys.readouterr().err


def test_ngram_flags_per_version(capsys):
    ngram = ["--model", TARGET, "--speculative-algorithm", "NGRAM"]
    args, warnings = resolve([*ngram, "--speculative-ngram-max-bfs-breadth", "4"], {})
    assert (args.speculative_eagle_topk, args.speculative_num_draft_tokens, args.disable_overlap_schedule) == (
        4,
        12,
        True,
    )
    assert args.speculative_ngram_branch_length == 18 and args.enable_mixed_chunk is False
    assert (
        "The overlap scheduler and mixed chunked prefill are disabled because of using ngram speculative "
        in (warnings[-1])
    )
    err = refused([*ngram, "--speculative-ngram-max-trie-depth", "8"], {}, capsys)
    assert "error: unrecognized arguments: --speculative-ngram-max-trie-depth 8" in err
    args, warnings = resolve([*ngram, "--speculative-ngram-max-trie-depth", "8"], V0523)
    assert (args.speculative_eagle_topk, args.speculative_num_steps, args.speculative_ngram_max_trie_depth) == (
        10,
        1,
        8,
    )
    assert "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. You can override " in (
        " ".join(warnings)
    )
    assert "The mixed chunked prefill are disabled because of using ngram speculative decoding." in warnings
    err = refused([*ngram, "--speculative-ngram-branch-length", "8"], V0523, capsys)
    assert "error: unrecognized arguments: --speculative-ngram-branch-length 8" in err
    with pytest.raises(ValueError, match=r"^Ngram speculative decoding only supports CUDA device\.$"):
        resolve([*ngram, "--device", "cpu"], {})
    with pytest.raises(ValueError, match=r"with page_size\(16\) > 1 is unstable and produces incorrect results"):
        resolve([*ngram, "--page-size", "16"], {})


def test_block_drafters_exist_in_era_c_only_with_their_rules(capsys):
    dflash = ["--model", TARGET, "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", DFLASH]
    err = refused(dflash, {}, capsys)
    assert "argument --speculative-algorithm: invalid choice: 'DFLASH'" in err
    eagle3 = ["--model", TARGET, *EAGLE3_2STEP]
    err = refused([*eagle3, "--speculative-dflash-block-size", "8"], {"SIMHOST_SGLANG_VERSION": "0.5.12"}, capsys)
    assert "unrecognized arguments: --speculative-dflash-block-size 8" in err
    args, warnings = resolve([*dflash, "--speculative-eagle-topk", "4"], V0523)
    assert (args.speculative_eagle_topk, args.speculative_num_steps, args.speculative_num_draft_tokens) == (1, 1, 16)
    assert "DFLASH only supports speculative_eagle_topk == 1; overriding speculative_eagle_topk=4 to 1." in warnings
    args, _ = resolve([*dflash, "--speculative-dflash-block-size", "8"], V0523)
    assert args.speculative_num_draft_tokens == 8
    with pytest.raises(ValueError, match=r"For DFLASH they must match\. speculative_num_draft_tokens=4, "):
        resolve([*dflash, "--speculative-dflash-block-size", "8", "--speculative-num-draft-tokens", "4"], V0523)
    with pytest.raises(ValueError, match=r"^DFLASH requires --speculative-dflash-block-size to be positive, got 0\.$"):
        resolve([*dflash, "--speculative-dflash-block-size", "0"], V0523)
    with pytest.raises(ValueError, match=r"^DFLASH speculative decoding requires setting --speculative-draft-model"):
        resolve(["--model", TARGET, "--speculative-algorithm", "dflash"], V0523)

    dspark = ["--model", TARGET, "--speculative-algorithm", "dspark", "--speculative-num-steps", "3"]
    args, warnings = resolve(dspark, V0523)
    assert args.speculative_algorithm == "DSPARK" and args.speculative_draft_model_path == TARGET
    assert (args.speculative_num_steps, args.speculative_num_draft_tokens) == (1, 5)
    assert "DSpark only supports speculative_num_steps == 1; overriding speculative_num_steps=3 to 1." in warnings
    assert "speculative_num_draft_tokens is not set; defaulting to 5 for DSpark." in warnings
    with pytest.raises(ValueError, match=r"^--speculative-dspark-confidence-threshold must be in \[0, 1\], got 1\.5\."):
        resolve([*dspark, "--speculative-dspark-confidence-threshold", "1.5"], V0523)
    with pytest.raises(ValueError, match="simhost does not simulate speculative algorithm 'UNO'"):
        resolve(["--model", TARGET, "--speculative-algorithm", "UNO"], V0523)


def test_nextn_on_an_mtp_target_runs_its_own_heads():
    args, _ = resolve(["--model", MTP_TARGET, "--speculative-algorithm", "NEXTN"], {})
    assert args.speculative_algorithm == "EAGLE" and args.speculative_draft_model_path == MTP_TARGET
    assert S.from_server_args(args).kind == "MTP"
    args, _ = resolve([*EAGLE3_2STEP[:4], "--model", TARGET], {})
    assert S.from_server_args(args).kind == "EAGLE3"


# ------------------------------------------------------------------------------------------------ servers


def kv_tokens(text: str) -> int:
    return int(re.search(r"max_total_num_tokens=(\d+),", text).group(1))  # type: ignore[union-attr]


def test_each_drafter_logs_its_weights_and_kv_and_costs_the_pool(launch):
    # One rank each, as the real engine logs it: the draft worker's `Load weight end ... mem usage=` and its own
    # `KV Cache is allocated` line after the target's; `max_total_num_tokens` shrinks with the drafter's KV bytes.
    # Each on a simulated GPU of its own: six servers loading at once on one GPU race for its memory, and which one the
    # simulated OOM kills depends on the machine's load.
    servers = {
        "none": launch("--base-gpu-id", "0"),
        "eagle3": launch(*EAGLE3_2STEP, "--base-gpu-id", "1"),
        "standalone": launch(
            "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", STANDALONE, "--base-gpu-id", "2"
        ),
        "ngram": launch("--speculative-algorithm", "NGRAM", "--base-gpu-id", "3"),
        "mtp": launch("--speculative-algorithm", "NEXTN", "--base-gpu-id", "4", model=MTP_TARGET),
        "dflash": launch(
            "--speculative-algorithm",
            "DFLASH",
            "--speculative-draft-model-path",
            DFLASH,
            "--base-gpu-id",
            "5",
            env=V0523,
        ),
    }
    texts = {}
    for name, server in servers.items():
        server.wait_for(r"max_total_num_tokens=")
        texts[name] = server.text()
    tokens = {name: kv_tokens(text) for name, text in texts.items()}
    assert tokens["standalone"] < 0.7 * tokens["eagle3"]  # its own 42-layer KV cache
    assert tokens["dflash"] < 0.9 * tokens["eagle3"]
    assert tokens["eagle3"] > 0.95 * tokens["mtp"] > 0
    draft_lines = {
        "standalone": r"type=DeepseekV3ForCausalLM, dtype=torch\.bfloat16, avail mem=[\d.]+ GB, mem usage=[\d.]+ GB\.",
        "mtp": r"type=DeepseekV3ForCausalLMNextN, dtype=torch\.bfloat16, avail mem=[\d.]+ GB, mem usage=[\d.]+ GB\.",
        "dflash": r"type=DFlashDraftModel, avail mem=[\d.]+ GB, mem usage=[\d.]+ GB\.",
    }
    for name, pattern in draft_lines.items():
        loads = re.findall(r"Load weight end\. .*", texts[name])
        assert len(loads) == 2 and re.search(pattern, loads[1]), loads
        kv = re.findall(r"KV Cache is allocated\. .*#tokens: (\d+)", texts[name])
        assert kv == [str(tokens[name])] * 2
    assert len(re.findall(r"Load weight end\.", texts["ngram"])) == 1  # no draft model
    assert tokens["ngram"] > tokens["eagle3"]


def test_nextn_on_a_target_without_mtp_layers_fails_loading_the_draft(launch):
    server = launch("--speculative-algorithm", "NEXTN")
    assert server.proc.wait(15) == -signal.SIGKILL
    text = server.text()
    assert re.search(r"^\[[\d :-]+\] Scheduler hit an exception: Traceback \(most recent call last\):$", text, re.M)
    assert "in load_weights\n" in text and "\nAssertionError: Only 1 nextn layer is supported\n" in text


def test_a_standalone_draft_of_another_vocabulary(launch):
    server = launch(
        "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", STANDALONE_32K, env=V0523
    )  # fmt: skip
    assert server.proc.wait(15) == -signal.SIGKILL
    assert (
        "ValueError: STANDALONE speculative decoding requires the draft model to share the same vocabulary as the "
        "target model, but got target vocab_size=163840 and draft vocab_size=32000."
    ) in server.text()


async def test_an_older_sglang_serves_the_other_vocabulary_and_corrupts_outputs(launch):
    server = launch(
        "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", STANDALONE_32K, env=FAST
    )  # fmt: skip
    server.wait_ready()
    ids = list(range(100, 140))
    async with aiohttp.ClientSession(server.base) as http:
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 12}}
        async with http.post("/generate", json=body) as r:
            out = (await r.json())["output_ids"]
    right = Request(input_ids=ids, max_new_tokens=12)
    right.emit(12, 163840)
    assert out[0] == right.output_ids[0] and out[1:] != right.output_ids[1:]
    assert "Traceback" not in server.text()


async def test_mtp_accepts_more_than_eagle3_and_dspark_reports_its_cap(launch):
    # A simulated GPU each: servers loading at once on one GPU race for its memory (see above).
    mtp = launch("--speculative-algorithm", "NEXTN", "--enable-metrics", "--decode-log-interval", "5",
                 "--base-gpu-id", "0", model=MTP_TARGET, env=FAST)  # fmt: skip
    eagle3 = launch(*EAGLE3_2STEP, "--enable-metrics", "--decode-log-interval", "5", "--base-gpu-id", "1", env=FAST)
    dspark = launch("--speculative-algorithm", "DSPARK", "--enable-metrics", "--decode-log-interval", "5",
                    "--base-gpu-id", "2", env={**FAST, **V0523})  # fmt: skip
    lengths = {}
    for name, server in (("mtp", mtp), ("eagle3", eagle3), ("dspark", dspark)):
        server.wait_ready()
        async with aiohttp.ClientSession(server.base) as http:
            bodies = [
                {"input_ids": list(range(i, i + 30)), "sampling_params": {"max_new_tokens": 200}} for i in range(4)
            ]
            for body in bodies:
                async with http.post("/generate", json=body) as r:
                    assert r.status == 200
            async with http.get("/metrics") as r:
                metrics_text = await r.text()
        found = re.search(r"^sglang:spec_accept_length\{.*\} ([\d.]+)$", metrics_text, re.M)
        assert found
        lengths[name] = float(found.group(1))
        if name == "dspark":
            cap = re.search(r"^sglang:spec_cap_length\{.*\} ([\d.]+)$", metrics_text, re.M)
            block = re.search(r"^sglang:spec_block_accept_length\{.*\} ([\d.]+)$", metrics_text, re.M)
            assert cap and float(cap.group(1)) == 5.0  # one request at a time: whole blocks
            assert block and 1.0 < float(block.group(1)) <= 6.0
        else:
            assert "spec_cap_length" not in metrics_text
    assert lengths["dspark"] > lengths["mtp"] > lengths["eagle3"]


# ------------------------------------------------------------------------------------------------ vLLM


V0111, V0171, V030, V033 = (VllmVersion.parse(v) for v in ("0.11.0", "0.17.1", "0.30.0", "0.33.0"))


def vllm_setup(ver: VllmVersion, config: dict[str, object], model: str = TARGET) -> vargs.EngineSetup:
    argv = [model, "-tp", "8", "--speculative-config", json.dumps(config)]
    return vargs.resolve(vargs.parse(argv, ver), ver, 143771)


def vllm_refusal(ver: VllmVersion, config: dict[str, object], model: str = TARGET) -> str:
    with pytest.raises(vargs.ConfigError) as raised:
        vllm_setup(ver, config, model)
    return raised.value.text


def test_vllm_ngram_lookup_defaults_and_validation():
    spec = vllm_setup(V033, {"method": "ngram", "num_speculative_tokens": 3}).spec
    assert spec is not None and spec.prompt_lookup == (5, 5)
    spec = vllm_setup(V033, {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}).spec
    assert spec is not None and spec.prompt_lookup == (4, 4)
    text = vllm_refusal(V033, {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 6,
                               "prompt_lookup_max": 4})  # fmt: skip
    assert "prompt_lookup_min=6 must be <= prompt_lookup_max=4" in text
    assert "prompt_lookup_min=0 must be > 0" in vllm_refusal(
        V033, {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 0}
    )


def test_vllm_methods_per_version():
    dflash = {"method": "dflash", "model": DFLASH, "num_speculative_tokens": 15}
    assert "Unknown speculative decoding method: dflash" in vllm_refusal(V030, dflash)
    setup = vllm_setup(V033, dflash)
    ns = engine_args(setup)
    assert (ns.speculative_algorithm, ns.speculative_num_draft_tokens) == ("DFLASH", 16)
    dspark = vllm_setup(V033, {"method": "dspark", "model": TARGET, "num_speculative_tokens": 5})
    assert S.from_server_args(engine_args(dspark)).max_accepted_drafts == 5
    draft_model = {"method": "draft_model", "model": STANDALONE, "num_speculative_tokens": 3}
    assert "Speculative decoding with draft model is not supported yet." in vllm_refusal(V0111, draft_model)
    assert engine_args(vllm_setup(V0171, draft_model)).speculative_algorithm == "STANDALONE"
    text = vllm_refusal(V0171, {**draft_model, "model": STANDALONE_32K})
    assert (
        "Target and draft model should have the same vocabulary size. Target model vocab_size=163840. Draft model "
        "vocab_size=32000. Using models with different tokenizers can cause out-of-bounds errors"
    ) in text
    mtp = vllm_setup(V033, {"method": "mtp", "num_speculative_tokens": 1}, model=MTP_TARGET)
    assert S.from_server_args(engine_args(mtp)).kind == "MTP"
    assert mtp.spec is not None and mtp.spec.draft_config is not None
    assert mtp.spec.draft_config["num_hidden_layers"] == 1  # its MTP layer, not a second target
    assert "has no MTP layers" in vllm_refusal(V033, {"method": "mtp", "num_speculative_tokens": 1})
    suffix = vllm_setup(V033, {"method": "suffix"}).spec
    assert suffix is not None and suffix.num_spec_tokens == 24 and suffix.draft_config is None
    assert "Unknown speculative decoding method: suffix" in vllm_refusal(V0111, {"method": "suffix"})


def test_vllm_k_tokens_are_sglangs_k_steps_at_topk_1():
    eagle3 = vllm_setup(V033, {"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 2})
    cfg = S.from_server_args(engine_args(eagle3))
    assert (cfg.kind, cfg.num_steps, cfg.topk, cfg.num_draft_tokens) == ("EAGLE3", 2, 1, 3)
    ngram = S.from_server_args(engine_args(vllm_setup(V033, {"method": "ngram", "num_speculative_tokens": 4})))
    assert ngram.max_accepted_drafts == 4


def test_a_drafter_window_is_honoured_by_eagle3_and_dflash_only():
    _, warnings = resolve(["--model", TARGET, "--speculative-algorithm", "NGRAM", "--speculative-draft-window-size",
                              "64"], V0523)  # fmt: skip
    assert (
        "--speculative-draft-window-size has no effect with speculative_algorithm=NGRAM (honored by Llama EAGLE-3 "
        "and DFLASH only)."
    ) in warnings
    with pytest.raises(ValueError, match=r"^--speculative-draft-window-size must be >= --speculative-num-draft-tokens"):
        resolve(["--model", TARGET, "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", DFLASH,
                 "--speculative-draft-window-size", "8"], V0523)  # fmt: skip


async def test_dspark_answers_its_own_spec_tokens_details(launch):
    server = launch("--speculative-algorithm", "DSPARK", env={**FAST, **V0523})
    server.wait_ready()
    async with aiohttp.ClientSession(server.base) as http:
        body = {"model": "default", "prompt": list(range(40)), "max_tokens": 60, "return_spec_tokens_details": True}
        async with http.post("/v1/completions", json=body) as r:
            details = (await r.json())["sglext"]["spec_tokens_details"]
    assert details["spec_cap_length"] == 5.0 and details["spec_cap_lens_histogram"] == [0, 0, 0, 0, 0, details[
        "spec_verify_ct"]]  # fmt: skip
    assert details["spec_block_accept_length"] == details["spec_accept_length"] > 1.0


def gpu_kv_tokens(text: str) -> int:
    found = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    assert found, text[-2000:]
    return int(found.group(1).replace(",", ""))


def test_vllm_drafters_cost_kv_cache_tokens(tmp_path):
    from .test_vllm_serve import start_vllm, stop

    env = {"SIMHOST_VLLM_VERSION": "0.33.0", "SIMHOST_GPU_MEMORY_MIB": "700000", **FAST}
    configs = {
        "none": None,
        "eagle3": {"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 3},
        "dflash": {"method": "dflash", "model": DFLASH, "num_speculative_tokens": 15},
        "draft_model": {"method": "draft_model", "model": STANDALONE, "num_speculative_tokens": 3},
        "ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
    }
    tokens = {}
    for name, config in configs.items():  # one at a time: they would share the simulated GPUs
        flags = ["--speculative-config", json.dumps(config)] if config else []
        server = start_vllm(tmp_path, "-tp", "2", *flags, env=env)
        try:
            server.wait_for(r"^INFO:     Application startup complete\.$")
            tokens[name] = gpu_kv_tokens(server.text())
        finally:
            stop(server)
    assert tokens["none"] > tokens["eagle3"] > tokens["dflash"]
    assert tokens["draft_model"] < 0.7 * tokens["eagle3"]
    assert tokens["ngram"] > tokens["eagle3"]  # no drafter
