# Log lines are quoted verbatim, however long.
# ruff: noqa: E501
"""The SGLang adapter against the log lines quoted in ../shared/reference/sglang-interface.md (real pastes
where the reference has them, its exact format strings otherwise)."""

from __future__ import annotations

import math
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.engines.facts import (
    CaptureProgress,
    DecodeStats,
    Failure,
    FailureSignal,
    GraphCaptured,
    Milestone,
    PrefillStats,
    ServerArgsDump,
    ServerLimits,
    ShardProgress,
    WeightsLoaded,
)
from workers.sglang import (
    arg_mismatches,
    find_failure,
    find_usage_error,
    launch_argv,
    parse_decode_line,
    parse_line,
    split_prefix,
)

# --- launch_argv -------------------------------------------------------------------------------------


def test_it_builds_baseline_flags() -> None:
    argv = launch_argv({"model_path": "/models/kimi-k2.5-sim", "tp_size": 8}, host="127.0.0.1", port=30000)

    assert argv == [
        "--model-path",
        "/models/kimi-k2.5-sim",
        "--tp-size",
        "8",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
    ]


def test_it_builds_eagle3_flags_with_extra_args_last() -> None:
    config = {
        "model_path": "/models/kimi-k2.5-sim",
        "served_model_name": "kimi",
        "tp_size": 8,
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "/models/kimi-k2.5-sim-eagle3",
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
        "extra_args": ["--mem-fraction-static", "0.85", "--enable-metrics"],
    }

    argv = launch_argv(config, host="0.0.0.0", port=31000)

    assert argv == [
        "--model-path", "/models/kimi-k2.5-sim",
        "--served-model-name", "kimi",
        "--tp-size", "8",
        "--host", "0.0.0.0",
        "--port", "31000",
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "/models/kimi-k2.5-sim-eagle3",
        "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "3",
        "--mem-fraction-static", "0.85", "--enable-metrics",
    ]  # fmt: skip


@pytest.mark.parametrize("algorithm", ["", None])
def test_it_leaves_draft_settings_out_of_a_baseline(algorithm: str | None) -> None:
    config = {
        "model_path": "/m",
        "speculative_algorithm": algorithm,
        "speculative_draft_model_path": "/d",
        "speculative_num_steps": 3,
        "tp_size": None,
    }

    assert launch_argv(config, host="h", port=1) == ["--model-path", "/m", "--host", "h", "--port", "1"]


def test_it_lets_sglang_choose_unset_speculative_parameters() -> None:
    config = {"model_path": "/m", "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/d"}

    argv = launch_argv(config, host="h", port=1)

    assert argv[-4:] == ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d"]
    assert not any(flag.startswith("--speculative-num") for flag in argv)


def test_it_refuses_a_config_without_model_or_with_string_extra_args() -> None:
    with pytest.raises(ValueError):
        launch_argv({"tp_size": 1}, host="h", port=1)
    with pytest.raises(TypeError):
        launch_argv({"model_path": "/m", "extra_args": "--enable-metrics"}, host="h", port=1)


# --- split_prefix ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[2026-02-23 10:00:00 TP3] msg", ("2026-02-23 10:00:00", 3, "msg")),
        ("[2025-10-22 10:27:56] KV Cache is allocated.", ("2025-10-22 10:27:56", None, "KV Cache is allocated.")),
        ("[2025-10-06 20:05:22 DP0 TP0] Capture cuda graph bs [1, 2]", ("2025-10-06 20:05:22", 0, "Capture cuda graph bs [1, 2]")),
        ("[2026-02-23 10:00:00.123 DP1 PP0 TP12 EP3] x", ("2026-02-23 10:00:00.123", 12, "x")),
        ("[2026-02-23 10:00:00 DP1] x", ("2026-02-23 10:00:00", None, "x")),
        ("  File \"scheduler.py\", line 3049", (None, None, "  File \"scheduler.py\", line 3049")),
        ("[not a prefix] x", (None, None, "[not a prefix] x")),
        ("", (None, None, "")),
    ],
)  # fmt: skip
def test_it_splits_the_log_prefix(line: str, expected: tuple[str | None, int | None, str]) -> None:
    assert split_prefix(line) == expected


_timestamps = st.datetimes(min_value=datetime(1000, 1, 1)).map(lambda moment: moment.strftime("%Y-%m-%d %H:%M:%S"))
_milliseconds = st.one_of(st.just(""), st.integers(0, 999).map(lambda ms: f".{ms:03d}"))
_rank_names = st.sampled_from(["DP", "PP", "EP", "ATTN_CP", "MOE_DP"])
_ranks = st.lists(st.tuples(_rank_names, st.integers(0, 64)).map(lambda part: f" {part[0]}{part[1]}"), max_size=3)


@given(_timestamps, _milliseconds, _ranks, st.one_of(st.none(), st.integers(0, 511)), st.text())
def test_it_splits_any_prefix_it_could_have_printed(
    timestamp: str, ms: str, ranks: list[str], tp: int | None, message: str
) -> None:
    parts = "".join(ranks) + ("" if tp is None else f" TP{tp}")

    assert split_prefix(f"[{timestamp}{ms}{parts}] {message}") == (timestamp + ms, tp, message)


@given(st.text().filter(lambda line: not line.startswith("[")))
def test_it_returns_unprefixed_lines_unchanged(line: str) -> None:
    assert split_prefix(line) == (None, None, line)


# --- parse_line --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "fact"),
    [
        # era B 0.5.9 startup (§3.2)
        ("Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]", ShardProgress(0, 0, 4)),
        ("Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:00<00:01,  2.32it/s]", ShardProgress(25, 1, 4)),
        ("Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:01<00:00,  2.49it/s]", ShardProgress(100, 4, 4)),
        ("[2026-02-23 10:00:06] Load weight begin. avail mem=138.50 GB", Milestone("weights_loading")),
        ("[2026-02-23 10:00:08] Load weight end. elapsed=2.10 s, type=LlamaForCausalLM, dtype=torch.bfloat16, "
         "avail mem=123.40 GB, mem usage=15.10 GB.", WeightsLoaded(None, 15.1)),
        ("[2026-02-23 10:00:08] KV Cache is allocated. #tokens: 600000, K size: 36.62 GB, V size: 36.62 GB",
         Milestone("kv_allocated")),
        ("[2026-02-23 10:00:09] Capture cuda graph begin. This can take up to several minutes. avail mem=47.50 GB",
         Milestone("graph_capture")),
        ("[2026-02-23 10:00:13] Capture draft cuda graph begin. This can take up to several minutes. avail mem=41.00 GB",
         Milestone("graph_capture")),
        ("[2026-02-23 10:00:20] Capture draft extend cuda graph begin. This can take up to several minutes. "
         "avail mem=40.60 GB", Milestone("graph_capture")),
        ("[2026-02-23 10:00:22] Capture draft extend cuda graph end. Time elapsed: 1.80 s. mem usage=0.10 GB. "
         "avail mem=40.50 GB.", GraphCaptured("draft", 1.8)),
        ("[2026-02-23 10:00:23] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
         Milestone("http_started")),
        ("[2026-02-23 10:00:24] INFO:     127.0.0.1:43210 - \"GET /model_info HTTP/1.1\" 200 OK", None),
        ("[2026-02-23 10:00:24] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
         "#running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, cuda graph: False",
         PrefillStats(1, 7, 0, 0, 0)),
        ("[2026-02-23 10:00:25] The server is fired up and ready to roll!", Milestone("ready")),
        ("Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
         "setting --max-running-requests.", None),
        # era A (real, 2025-08-08)
        ("[2025-08-08 03:34:38] KV Cache is allocated. #tokens: 104273, K size: 5.57 GB, V size: 5.57 GB",
         Milestone("kv_allocated")),
        ("[2025-08-08 03:34:38] Capture cuda graph bs [1, 2, 4, 8]", None),
        ("Capturing batches (bs=1 avail_mem=1.72 GB): 100%|█████████████████████| 4/4 [00:18<00:00,  4.57s/it]", CaptureProgress(100, 4, 4)),
        ("[2025-08-08 03:34:59] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, "
         "#running-req: 0, #queue-req: 0, ", PrefillStats(1, 6, 0, 0, 0)),
        ("[2025-08-08 03:35:19] Decode batch. #running-req: 1, #token: 47, token usage: 0.00, cuda graph: True, "
         "gen throughput (token/s): 2.18, #queue-req: 0, ",
         DecodeStats(1, 47, 0.0, None, None, True, 2.18, 0)),
        # 0.5.3-era EAGLE3, TP>1 (real, sglang#11948)
        ("[2025-10-22 10:27:56 TP0] Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, "
         "#running-req: 0, #queue-req: 0, ", PrefillStats(1, 28, 0, 0, 0)),
        ("[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 108, token usage: 0.00, accept len: 2.17, "
         "accept rate: 0.54, cuda graph: True, gen throughput (token/s): 0.39, #queue-req: 0, ",
         DecodeStats(1, 108, 0.0, 2.17, 0.54, True, 0.39, 0)),
        ("[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 186, token usage: 0.00, accept len: 1.95, "
         "accept rate: 0.49, cuda graph: True, gen throughput (token/s): 178.86, #queue-req: 0, ",
         DecodeStats(1, 186, 0.0, 1.95, 0.49, True, 178.86, 0)),
        # era B (0.5.9 format; real PD decode-node line)
        ("[2026-02-23 10:01:00] Decode batch, #running-req: 4, #token: 2210, token usage: 0.01, accept len: 2.61, "
         "accept rate: 0.54, cuda graph: True, gen throughput (token/s): 301.50, #queue-req: 2",
         DecodeStats(4, 2210, 0.01, 2.61, 0.54, True, 301.5, 2)),
        ("[2026-03-02 14:44:11 TP0] Decode batch, #running-req: 1, #token: 73, token usage: 0.00, pre-allocated "
         "usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, gen throughput "
         "(token/s): 78.20, #queue-req: 0", DecodeStats(1, 73, 0.0, None, None, True, 78.2, 0)),
        ("[2026-02-23 10:01:00] Decode batch [120], #running-req: 64, #token: 9000, token usage: 0.02, "
         "cuda graph: False, gen throughput (token/s): 5012.00, #queue-req: 0",
         DecodeStats(64, 9000, 0.02, None, None, False, 5012.0, 0)),
        ("[2026-02-23 10:00:24] Prefill batch, #new-seq: 2, #new-token: 256, #cached-token: 16, token usage: 0.00, "
         "#running-req: 3, #queue-req: 1, #pending-token: 0, cuda graph: False, input throughput (token/s): 9.10",
         PrefillStats(2, 256, 16, 3, 1)),
        # era C (real lines, 2026)
        ("[2026-07-21 08:21:55 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_bs=6, "
         "bs=[1, 2, 3, 4, 5, 6], avail mem=7.77 GB", Milestone("graph_capture")),
        ("[2026-07-21 08:22:00 TP0] Capture target verify CUDA graph end. elapsed=4.56 s, mem usage=0.38 GB, "
         "avail mem=7.39 GB.", GraphCaptured("target", 4.56)),
        ("[2026-07-21 08:22:00 TP0] Capture draft decode CUDA graph begin. backend=full, num_tokens_per_bs=1, "
         "bs=[1, 2, 3, 4, 5, 6], avail mem=7.39 GB", Milestone("graph_capture")),
        ("[2026-07-21 08:22:01 TP0] Capture draft extend CUDA graph begin. backend=full, num_tokens_per_bs=6, "
         "bs=[1, 2, 3, 4, 5, 6], avail mem=7.01 GB", Milestone("graph_capture")),
        ("[2026-08-17 16:52:13] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1933682, KV size: 12.45 GB",
         Milestone("kv_allocated")),
        ("[2026-10-10 11:59:36] Load weight end. elapsed=329.53 s, type=BailingMoeV3ForCausalLM, quant=fp8, "
         "fmt=e4m3, avail mem=29.67 GB, mem usage=80.31 GB.", WeightsLoaded(None, 80.31)),
        ("[2026-09-09 11:57:27] max_total_num_tokens=2618868, chunked_prefill_size=-1, max_prefill_tokens=16384, "
         "max_running_requests=48, context_len=16384, available_gpu_mem=13.38 GB", ServerLimits(2618868, 48, 16384)),
        ("[2026-08-07 17:36:20 TP0] Prefill batch, #new-seq: 1, #new-token: 128, #cached-token: 0, full token "
         "usage: 0.00, swa token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, npu graph: "
         "False, input throughput (token/s): 38.23", PrefillStats(1, 128, 0, 0, 0)),
        ("[2026-08-07 17:40:00 TP0] Decode batch, #running-req: 2, #token: 512, full token usage: 0.03, swa token "
         "usage: 0.01, accept len: 3.10, accept rate: 0.70, cap len: 4.00, cuda graph: True, gen throughput "
         "(token/s): 150.00, #queue-req: 0, est. decode TFLOPS/s (per GPU): 1.20",
         DecodeStats(2, 512, 0.03, 3.1, 0.7, True, 150.0, 0)),
        # shutdown and failures
        ("[2026-02-23 11:00:00] SIGTERM received. signum=15 frame=None Draining requests and shutting down...",
         Milestone("shutdown")),
        ("[2026-02-04 03:54:42] Scheduler hit an exception: Traceback (most recent call last):",
         FailureSignal("crashed", "Scheduler hit an exception: Traceback (most recent call last):")),
        ("[2026-06-17 09:57:15] Received sigquit from a child process. It usually means the child failed.",
         FailureSignal("crashed", "Received sigquit from a child process. It usually means the child failed.")),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 26.00 MiB. GPU 0 has a total capacity of "
         "11.66 GiB of which 9.81 MiB is free.", FailureSignal("oom", "torch.OutOfMemoryError: CUDA out of memory. "
         "Tried to allocate 26.00 MiB. GPU 0 has a total capacity of 11.66 GiB of which 9.81 MiB is free.")),
        ("Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection cl",
         FailureSignal("crashed", "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/"
         "pair.cc:534] Connection cl")),
        # the override warning is not a failure, only the raised ValueError is
        ("[2026-02-23 10:00:12] Warning: Target model's context_length (262144) is greater than the derived "
         "context_length (131072). This may lead to incorrect model outputs or CUDA errors.", None),
    ],
)  # fmt: skip
def test_it_reads_the_fact_of_each_reference_line(line: str, fact: object) -> None:
    assert parse_line(line) == fact
    # A flood's Decode lines are read by the Decode branch alone: the same stats, and nothing for any other line.
    decode = parse_decode_line(line)
    if isinstance(fact, DecodeStats):
        assert decode is not None and decode == (split_prefix(line)[0], fact)
    else:
        assert decode is None


CONTEXT_LENGTH_ERROR = (
    "ValueError: Warning: Target model's context_length (131072) is greater than the derived context_length "
    "(2048). This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may "
    "differ from max_position_embeddings in the model's config. To allow overriding this maximum, set the env "
    "var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
)


def test_it_reads_the_context_length_error() -> None:
    assert parse_line(CONTEXT_LENGTH_ERROR) == FailureSignal("context_length", CONTEXT_LENGTH_ERROR)


def test_it_reads_the_latest_state_of_a_redrawn_progress_bar() -> None:
    line = (
        "Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:00<00:01]\r"
        "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01]\r\n"
    )

    assert parse_line(line) == ShardProgress(50, 2, 4)


def test_it_finds_a_log_line_written_after_an_unfinished_bar() -> None:
    line = "Capturing batches (bs=4 avail_mem=1.72 GB):  50%|█████     | 2/4 [00:01<00:01][2026-02-23 10:00:06 TP1] Load weight begin. avail mem=138.50 GB"

    assert parse_line(line) == Milestone("weights_loading")


SERVER_ARGS_ERA_B = (
    "[2026-02-23 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', "
    "tokenizer_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_mode='auto', tokenizer_worker_num=1, "
    "skip_tokenizer_init=False, load_format='auto', ..., trust_remote_code=False, context_length=None, ..., "
    "host='0.0.0.0', port=30000, ..., mem_fraction_static=0.7, max_running_requests=48, ..., "
    "speculative_algorithm='EAGLE3', speculative_draft_model_path='...', ..., speculative_num_steps=5, "
    "speculative_eagle_topk=8, speculative_num_draft_tokens=32, ...)"
)


def test_it_reads_the_era_b_server_args_dump() -> None:
    fact = parse_line(SERVER_ARGS_ERA_B)

    assert isinstance(fact, ServerArgsDump)
    assert fact.args["model_path"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert fact.args["tokenizer_worker_num"] == 1
    assert fact.args["skip_tokenizer_init"] is False
    assert fact.args["context_length"] is None
    assert fact.args["port"] == 30000
    assert fact.args["mem_fraction_static"] == 0.7
    assert fact.args["speculative_algorithm"] == "EAGLE3"
    assert fact.args["speculative_num_draft_tokens"] == 32
    assert "..." not in fact.args


def test_it_keeps_unparseable_server_arg_values_as_text() -> None:
    line = (
        "server_args=ServerArgs(model_path='/m, with comma', cuda_graph_bs=[1, 2, 4], "
        "load_format=<LoadFormat.AUTO: 'auto'>, extra={'a': (1, 2)}, max_lora_chunk_size=inf, "
        "weird=SomeConfig(x=1, y=[2, 3]), quote='it\\'s')"
    )

    fact = parse_line(line)

    assert isinstance(fact, ServerArgsDump)
    assert fact.args == {
        "model_path": "/m, with comma",
        "cuda_graph_bs": [1, 2, 4],
        "load_format": "<LoadFormat.AUTO: 'auto'>",
        "extra": {"a": (1, 2)},
        "max_lora_chunk_size": math.inf,
        "weird": "SomeConfig(x=1, y=[2, 3])",
        "quote": "it's",
    }


def test_it_reads_the_era_c_server_args_dict() -> None:
    literal = parse_line(
        "[2026-09-18 12:00:00] server_args={'model_path': '/m', 'tp_size': 8, 'speculative_algorithm': None}"
    )
    with_objects = parse_line("server_args={'model_path': '/m', 'dtype': torch.bfloat16, 'ratio': {'a': 1}}")

    assert literal == ServerArgsDump({"model_path": "/m", "tp_size": 8, "speculative_algorithm": None})
    assert with_objects == ServerArgsDump({"model_path": "/m", "dtype": "torch.bfloat16", "ratio": {"a": 1}})


def test_it_marks_the_server_args_milestone_when_the_dump_is_unreadable() -> None:
    assert parse_line("server_args=<unprintable>") == Milestone("server_args")


_FRAGMENTS = [
    "[2026-02-23 10:00:00 TP0] ",
    "Decode batch, ",
    "Decode batch. ",
    "Prefill batch, ",
    "#running-req: ",
    "#token: ",
    "token usage: ",
    "accept len: ",
    "cuda graph: ",
    ", ",
    ": ",
    "server_args=ServerArgs(",
    "server_args={",
    "'",
    "\\",
    "(",
    ")",
    "{",
    "<",
    "=",
    "shards: ",
    "% Completed | ",
    "/",
    "\r",
    "Traceback (most recent call last):",
    "ValueError: ",
    "CUDA out of memory",
]
_log_like = st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=8)), max_size=20).map("".join)


@given(st.one_of(st.text(), _log_like))
def test_it_never_raises_on_arbitrary_text(line: str) -> None:
    parse_line(line)


@given(st.lists(st.one_of(st.text(), _log_like, st.sampled_from(['  File "x.py", line 1', "", "KeyError: 'x'"]))))
def test_it_never_raises_while_looking_for_failures(lines: list[str]) -> None:
    failure = find_failure(lines)

    if failure is not None:
        assert 0 <= failure.first_line <= failure.last_line < len(lines)


# --- find_failure ------------------------------------------------------------------------------------

CLEAN_STARTUP = """\
Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests.
Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler. 
[2026-02-23 10:00:05] Init torch distributed begin.
[2026-02-23 10:00:05] Init torch distributed ends. elapsed=0.31 s, mem usage=0.00 GB
[2026-02-23 10:00:06] Load weight begin. avail mem=138.50 GB
Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]
Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:01<00:00,  2.49it/s]
[2026-02-23 10:00:08] Load weight end. elapsed=2.10 s, type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=123.40 GB, mem usage=15.10 GB.
[2026-02-23 10:00:08] Using KV cache dtype: torch.bfloat16
[2026-02-23 10:00:08] KV Cache is allocated. #tokens: 600000, K size: 36.62 GB, V size: 36.62 GB
[2026-02-23 10:00:08] Memory pool end. avail mem=48.00 GB
[2026-02-23 10:00:09] Capture cuda graph begin. This can take up to several minutes. avail mem=47.50 GB
[2026-02-23 10:00:09] Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8]
Capturing batches (bs=1 avail_mem=47.10 GB): 100%|██████████| 8/8 [00:03<00:00,  2.40it/s]
[2026-02-23 10:00:12] Capture cuda graph end. Time elapsed: 3.41 s. mem usage=0.50 GB. avail mem=47.00 GB.
[2026-02-23 10:00:12] Init torch distributed begin.
[2026-02-23 10:00:12] Load weight begin. avail mem=47.00 GB
[2026-02-23 10:00:13] Load weight end. elapsed=0.50 s, type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=46.10 GB, mem usage=0.90 GB.
[2026-02-23 10:00:13] KV Cache is allocated. #tokens: 600000, K size: 2.29 GB, V size: 2.29 GB
[2026-02-23 10:00:13] Capture draft cuda graph begin. This can take up to several minutes. avail mem=41.00 GB
[2026-02-23 10:00:20] Capture draft cuda graph end. Time elapsed: 6.90 s. mem usage=0.40 GB. avail mem=40.60 GB.
[2026-02-23 10:00:22] max_total_num_tokens=600000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=131072, available_gpu_mem=40.50 GB
[2026-02-23 10:00:23] INFO:     Started server process [12345]
[2026-02-23 10:00:23] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-02-23 10:00:24] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, cuda graph: False
[2026-02-23 10:00:25] INFO:     127.0.0.1:43220 - "POST /generate HTTP/1.1" 200 OK
[2026-02-23 10:00:25] The server is fired up and ready to roll!
[2026-02-23 10:00:27] Decode batch, #running-req: 1, #token: 300, token usage: 0.00, accept len: 2.61, accept rate: 0.54, cuda graph: True, gen throughput (token/s): 94.10, #queue-req: 0
""".splitlines()  # noqa: W291


def test_it_finds_no_failure_in_a_clean_startup() -> None:
    assert find_failure(CLEAN_STARTUP) is None
    assert find_failure([]) is None


def test_it_reads_the_startup_milestones_in_order() -> None:
    facts = list(map(parse_line, CLEAN_STARTUP))
    # A model's weights loaded carry what they took: the milestone with its figure.
    milestones = [
        "weights_loaded" if isinstance(fact, WeightsLoaded) else fact.name
        for fact in facts
        if isinstance(fact, Milestone | WeightsLoaded)
    ]

    assert milestones == [
        "weights_loading", "weights_loaded", "kv_allocated", "graph_capture",
        "weights_loading", "weights_loaded", "kv_allocated", "graph_capture",
        "http_started", "ready",
    ]  # fmt: skip


def test_it_finds_the_draft_context_length_error() -> None:
    crash = [
        "[2026-02-04 03:54:42] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3049, in run_scheduler_process',
        "    scheduler = Scheduler(",
        "                ^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 350, in __init__',
        "    self.init_model_worker()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 540, in init_model_worker',
        "    self.maybe_init_draft_worker()",
        CONTEXT_LENGTH_ERROR,
        "",
        "[2026-02-04 03:54:42] Received sigquit from a child process. It usually means the child failed.",
    ]
    lines = CLEAN_STARTUP[:12] + crash

    failure = find_failure(lines)

    assert failure == Failure("context_length", CONTEXT_LENGTH_ERROR, first_line=12, last_line=20)


def test_it_prefers_the_traceback_to_the_sigquit_notice() -> None:
    # Real (sglang#28521): the window ends before the traceback does.
    lines = [
        "[2026-06-17 09:57:15] Received sigquit from a child process. It usually means the child failed.",
        "[2026-06-17 09:57:15] kill_process_tree called: parent_pid=1, include_parent=True, pid=1",
        "[2026-06-17 09:57:15 TP4] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4046, in run_scheduler_process',
        "    scheduler = Scheduler(",
    ]

    failure = find_failure(lines)

    assert failure == Failure(
        "crashed", "TP4: Scheduler hit an exception: Traceback (most recent call last):", first_line=2, last_line=4
    )


def test_it_reports_the_final_exception_of_a_crash() -> None:
    lines = [
        "[2026-02-23 10:00:25] The server is fired up and ready to roll!",
        "[2026-02-23 10:00:30 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sglang/srt/managers/scheduler.py", line 2001, in event_loop_normal',
        "    result = self.run_batch(batch)",
        "AttributeError: 'NoneType' object has no attribute 'verify'",
        "[2026-02-23 10:00:30] Received sigquit from a child process. It usually means the child failed.",
        "[2026-02-23 10:00:30 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sglang/srt/managers/scheduler.py", line 2001, in event_loop_normal',
        "RuntimeError: NCCL communicator was aborted",
    ]

    failure = find_failure(lines)

    assert failure == Failure(
        "crashed", "TP0: AttributeError: 'NoneType' object has no attribute 'verify'", first_line=1, last_line=4
    )


def test_it_classifies_a_graph_capture_oom_with_its_whole_excerpt() -> None:
    lines = [
        "[2026-02-23 10:00:09 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.50 GB",
        "Capturing batches (bs=8 avail_mem=0.01 GB):  12%|█▎        | 1/8 [00:01<00:09]\r",
        "[2026-02-23 10:00:10 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 380, in __init__',
        "    self.capture()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 26.00 MiB. GPU 0 has a total capacity of 11.66 GiB of which 9.81 MiB is free.",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/sglang/srt/managers/scheduler.py", line 3049, in run_scheduler_process',
        "    raise Exception(",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 26.00 MiB.",
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
        "3. disable torch compile by not using --enable-torch-compile",
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
        "[2026-02-23 10:00:10] Received sigquit from a child process. It usually means the child failed.",
    ]

    failure = find_failure(lines)

    assert failure is not None
    assert failure.kind == "oom"
    assert failure.message.startswith("TP0: torch.OutOfMemoryError: CUDA out of memory.")
    assert (failure.first_line, failure.last_line) == (2, 18)


def test_it_finds_a_lone_oom_line() -> None:
    lines = [
        *CLEAN_STARTUP[:5],
        "[2026-02-23 10:00:06] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: self.server_args.mem_fraction_static=0.5",
        "[2026-02-23 10:00:06] Received sigquit from a child process. It usually means the child failed.",
    ]

    failure = find_failure(lines)

    assert failure is not None
    assert (failure.kind, failure.first_line, failure.last_line) == ("oom", 5, 5)


def test_it_ignores_the_allowed_context_length_override() -> None:
    lines = [
        *CLEAN_STARTUP[:12],
        "[2026-02-23 10:00:12] Warning: Target model's context_length (262144) is greater than the derived "
        "context_length (131072). This may lead to incorrect model outputs or CUDA errors.",
        "[2026-02-23 10:00:12] Overriding the draft model's max_position_embeddings to 262144.",
        *CLEAN_STARTUP[12:],
    ]

    assert find_failure(lines) is None


def test_it_finds_argparse_refusing_a_flag():
    lines = [
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]",
        "                        [--speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}]",
        "launch_server.py: error: unrecognized arguments: --no-such-flag 3",
    ]

    found = find_usage_error(["[2026-11-29 10:00:00] something before", *lines])

    assert found is not None
    assert found.kind == "misconfigured"
    assert found.message == "unrecognized arguments: --no-such-flag 3"
    assert (found.first_line, found.last_line) == (1, 3)


def test_it_finds_no_usage_error_in_a_clean_log():
    assert find_usage_error(["[2026-11-29 10:00:00] The server is fired up and ready to roll!"]) is None


# --- requested vs effective -------------------------------------------------------------------------


def test_it_reports_server_args_that_differ_from_the_request_but_not_sglangs_own_rewrites():
    requested = {"tp_size": 8, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "mem_fraction_static": 0.8}
    effective = {"tp_size": 4, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "mem_fraction_static": 0.7}
    assert arg_mismatches(requested, effective) == ["requested tp_size=8, the server runs tp_size=4"]
    assert arg_mismatches({"speculative_algorithm": "EAGLE3"}, {"speculative_algorithm": "EAGLE"}) == [
        "requested speculative_algorithm='EAGLE3', the server runs speculative_algorithm='EAGLE'"
    ]
    assert arg_mismatches({"speculative_algorithm": ""}, {"speculative_algorithm": None}) == []
    assert arg_mismatches({"tp_size": 8}, {}) == []  # not reported: nothing to compare
