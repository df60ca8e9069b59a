# Log lines are quoted verbatim, however long.
# ruff: noqa: E501
"""The vLLM adapter against the log lines quoted in ../shared/reference/vllm-interface.md (real fragments where the
reference has them, its exact format strings otherwise): every era's prefixes, the stats and SpecDecoding lines (formats
A and B), the startup milestones, the engine config line, the warnings, the launch argv and the effective args."""

from __future__ import annotations

import json

import pytest

from workers import engines
from workers.engines.facts import (
    CaptureProgress,
    DecodeStats,
    FailureSignal,
    GraphCaptured,
    Milestone,
    ServerArgsDump,
    ServerLimits,
    ShardProgress,
    WeightsLoaded,
)
from workers.vllm import (
    arg_mismatches,
    clean_line,
    engine_config,
    find_warning,
    launch_argv,
    parse_line,
    parse_step_line,
    split_prefix,
)
from workers.vllm.adapter import VLLM

STATS_011 = "(APIServer pid=722408) INFO 10-26 12:36:26 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 47.4 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.9%, Prefix cache hit rate: 37.2%"
SPEC_B_011 = "(APIServer pid=722408) INFO 10-26 12:36:16 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.01, Accepted throughput: 20.60 tokens/s, Drafted throughput: 60.90 tokens/s, Accepted: 206 tokens, Drafted: 609 tokens, Per-position acceptance rate: 0.601, 0.286, 0.128, Avg Draft acceptance rate: 33.8%"
SPEC_A_092 = "INFO 07-07 10:00:10 [metrics.py:87] SpecDecoding metrics: Draft acceptance rate: 71.3%, Mean acceptance length: 3.14, Accepted: 214 tokens, Drafted: 300 tokens, Per-position acceptance rate: 0.860, 0.710, 0.570"
ENGINE_CONFIG = (
    "(EngineCore_DP0 pid=8884) INFO 10-26 12:30:01 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
    "model='/models/original/Qwen-Qwen3-32B', speculative_config=SpeculativeConfig(method='eagle3', "
    "model='/models/original/RedHatAI-Qwen3-32B-speculator.eagle3', num_spec_tokens=3), "
    "tokenizer='/models/original/Qwen-Qwen3-32B', skip_tokenizer_init=False, dtype=torch.bfloat16, max_seq_len=40960, "
    "tensor_parallel_size=2, enforce_eager=False, served_model_name=Qwen3-32B, "
    "compilation_config={'level': 3, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'sizes': [1, 2]}"
)

# --- prefixes of every era --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "process", "timestamp", "message"),
    [
        # era A: API server and EngineCore unprefixed, TP workers `VllmWorker rank=N` in cyan
        (
            "INFO 05-02 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5.post1",
            None,
            "05-02 10:00:00",
            "vLLM API server version 0.8.5.post1",
        ),
        (
            "\x1b[1;36m(VllmWorker rank=1 pid=1204085)\x1b[0;0m INFO 05-02 10:00:03 [default_loader.py:267] Loading weights took 9.20 seconds",
            "VllmWorker rank=1",
            "05-02 10:00:03",
            "Loading weights took 9.20 seconds",
        ),
        # era B (0.10.x): every line, always cyan
        (
            "\x1b[1;36m(EngineCore_0 pid=31)\x1b[0;0m INFO 08-18 10:00:00 [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: model='/m'",
            "EngineCore_0",
            "08-18 10:00:00",
            "Initializing a V1 LLM engine (v0.10.1) with config: model='/m'",
        ),
        (
            "\x1b[1;36m(VllmWorker TP0 pid=32)\x1b[0;0m INFO 08-18 10:00:01 [parallel_state.py:1102] rank 0 in world size 2",
            "VllmWorker TP0",
            "08-18 10:00:01",
            "rank 0 in world size 2",
        ),
        # era C: the real 0.10.2 access line, uvicorn's level prefix dropped
        (
            '\x1b[1;36m(APIServer pid=3829093)\x1b[0;0m INFO:     127.0.0.1:40084 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
            "APIServer",
            None,
            '127.0.0.1:40084 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        ),
        (
            "(Worker_TP0 pid=8890) WARNING 10-26 12:30:05 [gpu_model_runner.py:3000] something",
            "Worker_TP0",
            "10-26 12:30:05",
            "something",
        ),
        # era D: `(EngineCore pid=N)`, `(Worker pid=N)` before ranks are known
        (
            "(EngineCore pid=77) INFO 04-18 09:00:00 [core.py:77] Initializing",
            "EngineCore",
            "04-18 09:00:00",
            "Initializing",
        ),
        (
            "(Worker pid=78) ERROR 04-18 09:00:01 [multiproc_executor.py:600] WorkerProc failed to start.",
            "Worker",
            "04-18 09:00:01",
            "WorkerProc failed to start.",
        ),
        # era E: the formatter's prefix; uvicorn bare; a traceback's own lines bare (indent kept)
        (
            "(APIServer pid=12) INFO 11-01 08:00:00 [api_server.py:1839] vLLM server version 0.33.0, serving model m",
            "APIServer",
            "11-01 08:00:00",
            "vLLM server version 0.33.0, serving model m",
        ),
        ("INFO:     Application startup complete.", None, None, "Application startup complete."),
        (
            '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
            None,
            None,
            '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
        ),
        # DEBUG: a shortened path as the file; a traceback line inside a logged record keeps its indent
        (
            "(EngineCore_DP0 pid=8) DEBUG 10-26 12:30:00 [v1/engine/utils.py:773] Waiting for 1 local, 0 remote core engine proc(s) to start.",
            "EngineCore_DP0",
            "10-26 12:30:00",
            "Waiting for 1 local, 0 remote core engine proc(s) to start.",
        ),
        (
            '(EngineCore_DP0 pid=8) ERROR 10-26 12:30:00 [core.py:708]   File "core.py", line 699, in run_engine_core',
            "EngineCore_DP0",
            "10-26 12:30:00",
            '  File "core.py", line 699, in run_engine_core',
        ),
    ],
)
def test_it_strips_the_prefixes_of_every_era(line, process, timestamp, message):
    assert split_prefix(line) == (process, timestamp, message)


def test_it_keeps_the_last_state_of_a_bar_and_a_record_written_after_one():
    bar = "Capturing CUDA graphs (decode, FULL):   0%|          | 0/35 [00:00<?, ?it/s]\r(Worker_TP0 pid=5) Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35 [00:03<00:00, 9.71it/s]\r\n"
    after_bar = "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.62it/s](APIServer pid=4) INFO 10-26 12:36:26 [loggers.py:127] Engine 000: Avg"
    multi_line_record = "(EngineCore_DP0 pid=8) ERROR 10-26 12:30:00 [core.py:708] EngineCore failed to start.\r"

    assert (
        clean_line(bar)
        == "(Worker_TP0 pid=5) Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35 [00:03<00:00, 9.71it/s]"
    )
    assert clean_line(after_bar).startswith("(APIServer pid=4) INFO 10-26 12:36:26")
    assert split_prefix(multi_line_record)[2] == "EngineCore failed to start."
    assert parse_line(bar) == CaptureProgress(100, 35, 35)


# --- the step lines -----------------------------------------------------------------------------------------------


def _step(line: str) -> tuple[str | None, DecodeStats]:
    parsed = parse_step_line(line)
    assert parsed is not None
    return parsed


def _logged_args(line: str) -> dict:
    fact = parse_line(line)
    assert isinstance(fact, ServerArgsDump)
    return fact.args


def test_it_reads_a_format_b_spec_decoding_line_as_a_step_point():
    timestamp, stats = _step(SPEC_B_011)

    assert timestamp == "10-26 12:36:16"
    assert stats.accept_len == 2.01 and stats.accept_rate == 0.338
    # 206 accepted + 609 drafted / 3 positions = 409 tokens over the line's 10 s: 20.60 + 60.90 / 3 tokens/s
    assert stats.gen_throughput == pytest.approx(40.9)
    assert stats.running_req == 1


def test_it_reads_a_format_a_spec_decoding_line_over_the_default_interval():
    timestamp, stats = _step(SPEC_A_092)

    assert timestamp == "07-07 10:00:10"
    assert stats.accept_len == 3.14 and stats.accept_rate == 0.713
    assert stats.gen_throughput == pytest.approx((214 + 300 / 3) / 10)


def test_it_reads_no_acceptance_from_a_nan_line_and_no_step_from_other_lines():
    nan_rate = SPEC_B_011.replace("Avg Draft acceptance rate: 33.8%", "Avg Draft acceptance rate: nan%")

    parsed = parse_step_line(nan_rate)
    assert parsed is not None and parsed[1].accept_rate is None
    assert parse_step_line(STATS_011) is None
    assert parse_step_line("SpecDecoding metrics: garbled") is None
    assert VLLM.grammar.step_marker in SPEC_A_092 and VLLM.grammar.step_marker in SPEC_B_011
    assert VLLM.grammar.step_marker not in STATS_011


def test_it_says_a_stats_line_with_nothing_running_was_idle():
    idle = STATS_011.replace("Running: 1 reqs", "Running: 0 reqs")
    v0 = "INFO 05-02 10:00:00 [metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, CPU KV cache usage: 0.0%."
    aggregated = "(APIServer pid=1) INFO 10-26 12:36:26 [loggers.py:200] 2 Engines Aggregated: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 9.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%"

    assert VLLM.grammar.prefill_marker is not None and VLLM.grammar.prefill_marker in STATS_011
    assert not VLLM.grammar.prefill_was_idle(STATS_011)
    assert VLLM.grammar.prefill_was_idle(idle)
    assert VLLM.grammar.prefill_was_idle(v0)
    assert not VLLM.grammar.prefill_was_idle(aggregated)


def test_a_cell_summary_leaves_out_the_spec_lines_after_an_idle_interval():
    idle_stats = STATS_011.replace("Running: 1 reqs", "Running: 0 reqs")
    low = SPEC_B_011.replace("Mean acceptance length: 2.01", "Mean acceptance length: 1.10")
    lines = [idle_stats, low, STATS_011, SPEC_B_011, STATS_011, SPEC_B_011]

    summary = engines.decode_summary(VLLM.grammar, 100, lines)

    assert summary["lines"] == 3 and summary["idle_lines"] == 1
    assert summary["mean_accept_len"] == 2.01
    assert summary["mean_gen_throughput"] == pytest.approx(40.9)
    assert (summary["first_line"], summary["last_line"]) == (101, 105)


def test_the_acceptance_alarm_fires_on_collapsed_spec_decoding_lines():
    collapsed = SPEC_B_011.replace("Mean acceptance length: 2.01", "Mean acceptance length: 1.00")
    facts = engines.LogFacts(VLLM.grammar, {})
    watch = engines.AcceptanceWatch(step_lines=VLLM.step_lines)

    batch = facts.read(10, [STATS_011, collapsed, STATS_011, collapsed, STATS_011, collapsed])
    alarm = watch.feed(batch.decode)

    assert [point["n"] for point in batch.decode] == [11, 13, 15]
    assert alarm is not None and alarm.kind == engines.ACCEPTANCE_ALARM_KINDS[0]
    assert "3 SpecDecoding lines in a row" in alarm.message


# --- startup ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "fact"),
    [
        (
            "(EngineCore_DP0 pid=8) INFO 10-26 12:30:02 [gpu_model_runner.py:2602] Starting to load model /models/Qwen3-32B...",
            Milestone("weights_loading"),
        ),
        (
            "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.62it/s]",
            ShardProgress(50, 2, 4),
        ),
        (
            "(EngineCore_DP0 pid=8) Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.70it/s]",
            ShardProgress(100, 4, 4),
        ),
        (
            "(EngineCore_DP0 pid=8) INFO 10-26 12:30:09 [default_loader.py:267] Loading weights took 5.81 seconds",
            Milestone("weights_loaded"),
        ),
        (
            "(EngineCore_DP0 pid=8) INFO 10-26 12:30:10 [gpu_model_runner.py:2653] Model loading took 61.5437 GiB and 6.823120 seconds",
            WeightsLoaded(None, 61.5437, models="all"),
        ),
        (
            "(EngineCore pid=8) INFO 11-01 08:00:10 [gpu_model_runner.py:2653] Model loading took 15.4 GiB memory and 6.123456 seconds",
            WeightsLoaded(None, 15.4, models="all"),
        ),
        (
            "(EngineCore_DP0 pid=8) INFO 10-26 12:30:40 [gpu_worker.py:298] Available KV cache memory: 9.87 GiB",
            Milestone("kv_allocated"),
        ),
        (
            "(EngineCore_DP0 pid=8) INFO 10-26 12:30:40 [kv_cache_utils.py:1087] GPU KV cache size: 80,864 tokens",
            ServerLimits(80864, None, None),
        ),
        (
            "(EngineCore_DP0 pid=8) INFO 10-26 12:30:40 [kv_cache_utils.py:1091] Maximum concurrency for 40,960 tokens per request: 1.97x",
            Milestone("kv_allocated"),
        ),
        (
            "(EngineCore pid=8) INFO 11-01 08:00:20 [kv_cache_utils.py:1087] GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 8,192 tokens per request: 150.70x",
            ServerLimits(1234560, None, 8192),
        ),
        (
            "(EngineCore_DP0 pid=8) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/67 [00:00<?, ?it/s]",
            Milestone("graph_capture"),
        ),
        (
            "(EngineCore_DP0 pid=8) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  52%|█████▏    | 35/67 [00:02<00:01, 17.1it/s]",
            CaptureProgress(52, 35, 67),
        ),
        ("Capturing CUDA graph shapes: 100%|██████████| 67/67 [00:20<00:00,  3.30it/s]", CaptureProgress(100, 67, 67)),
        (
            "(EngineCore_DP0 pid=8) INFO 10-26 12:31:02 [gpu_model_runner.py:3480] Graph capturing finished in 22 secs, took 0.54 GiB",
            GraphCaptured("target", 22.0),
        ),
        (
            "(Worker_TP1 pid=9) INFO 10-26 12:31:02 [gpu_model_runner.py:3480] Graph capturing finished in 22 secs, took 0.54 GiB",
            None,
        ),
        (
            "(APIServer pid=7) INFO 10-26 12:31:05 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000",
            Milestone("http_started"),
        ),
        (
            "INFO 05-02 10:01:00 [api_server.py:1081] Starting vLLM API server on http://0.0.0.0:8000",
            Milestone("http_started"),
        ),
        (
            "(APIServer pid=7) INFO 04-18 09:01:00 [api_server.py:1912] Starting vLLM server on http://0.0.0.0:8000",
            Milestone("http_started"),
        ),
        ("(APIServer pid=7) INFO:     Application startup complete.", Milestone("ready")),
        ("INFO:     Application startup complete.", Milestone("ready")),
        (
            "(APIServer pid=7) INFO 10-26 13:00:00 [launcher.py:80] Shutting down FastAPI HTTP server.",
            Milestone("shutdown"),
        ),
        (
            "(APIServer pid=7) INFO 11-01 09:00:00 [launcher.py:99] [shutdown] API server: shutdown triggered",
            Milestone("shutdown"),
        ),
        (
            "(APIServer pid=7) INFO 10-26 12:29:50 [utils.py:233] non-default args: {'model_tag': '/m', 'speculative_config': {'method': 'eagle3'}}",
            Milestone("server_args"),
        ),
        ("(APIServer pid=7) INFO 10-26 12:29:50 [api_server.py:1839] vLLM API server version 0.11.0", None),
        ('(APIServer pid=7) INFO:     127.0.0.1:40084 - "POST /v1/completions HTTP/1.1" 200 OK', None),
    ],
)
def test_it_reads_the_startup_lines(line, fact):
    assert parse_line(line) == fact


def test_it_reads_the_engine_config_line_as_the_effective_args():
    fact = parse_line(ENGINE_CONFIG)

    assert isinstance(fact, ServerArgsDump)
    args = fact.args
    assert args["tensor_parallel_size"] == 2 and args["max_seq_len"] == 40960
    assert (args["method"], args["model"], args["num_spec_tokens"]) == (
        "eagle3",
        "/models/original/RedHatAI-Qwen3-32B-speculator.eagle3",
        3,
    )
    assert args["model_path"] == "/models/original/Qwen-Qwen3-32B"
    assert args["served_model_name"] == "Qwen3-32B" and args["dtype"] == "torch.bfloat16"
    assert args["enforce_eager"] is False
    assert args["compilation_config"].startswith("{'level': 3")
    json.dumps(args)  # stored on the run as JSON


def test_a_baseline_config_line_has_no_speculative_fields():
    args = engine_config("model='/m', speculative_config=None, max_seq_len=8192, tensor_parallel_size=1")

    assert args == {"model_path": "/m", "speculative_config": None, "max_seq_len": 8192, "tensor_parallel_size": 1}


def test_an_elided_draft_keeps_the_other_speculative_fields():
    args = engine_config("speculative_config=SpeculativeConfig(method='eagle3', model=..., num_spec_tokens=3)")

    assert (args["method"], args["model"], args["num_spec_tokens"]) == ("eagle3", "...", 3)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "(EngineCore_DP0 pid=8884) ERROR 10-26 12:30:41 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 140.75 MiB is free.",
            "oom",
        ),
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
            "oom",
        ),
        (
            "ValueError: Free memory on device (3.22/4.0 GiB) on startup is less than desired GPU memory utilization (0.9, 3.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
            "oom",
        ),
        (
            "ValueError: Free memory on device cuda:0 (3.22/4.0 GiB) on startup is less than desired GPU memory utilization (0.9, 3.6 GiB).",
            "oom",
        ),
        (
            "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.87 GiB). Based on the available memory, the estimated maximum model length is 80864.",
            "oom",
        ),
        ("RuntimeError: CUDA driver error: out of memory", "oom"),
        (
            "ValueError: User-specified max_model_len (262144) is greater than the derived max_model_len (max_position_embeddings=131072 or model_max_length=None in model's config.json).",
            "context_length",
        ),
        (
            "  Value error, speculative_max_model_len=5000 cannot be larger than draft_max_model_len=2048 [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]",
            "context_length",
        ),
        (
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}",
            "crashed",
        ),
        (
            "(Worker pid=5) ERROR 04-18 09:00:01 [multiproc_executor.py:600] RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "crashed",
        ),
        (
            "(APIServer pid=7) ERROR 10-26 13:00:00 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
            "crashed",
        ),
        ("/bin/sh: line 1: 4242 Killed                  vllm serve /m", "host_oom"),
    ],
)
def test_it_reads_a_failure_from_a_single_line(line, kind):
    fact = parse_line(line)

    assert isinstance(fact, FailureSignal) and fact.kind == kind


def test_a_long_max_model_len_allowed_by_the_environment_is_no_failure():
    warned = "(APIServer pid=7) WARNING 10-26 12:29:51 [model.py:1520] User-specified max_model_len (300000) is greater than the derived max_model_len (262144). Make sure the value is correct and within the model context size."

    assert parse_line(warned) is None


def test_a_request_too_long_for_the_model_is_no_failure():
    line = "(APIServer pid=7) ERROR 10-26 13:00:00 [serving_completion.py:120] This model's maximum context length is 40960 tokens. However, your request has 50000 input tokens. Please reduce the length of the input messages."

    assert parse_line(line) is None


def test_the_live_facts_read_a_whole_startup():
    lines = [
        "(APIServer pid=7) INFO 10-26 12:29:50 [utils.py:233] non-default args: {'model_tag': '/models/original/Qwen-Qwen3-32B'}",
        ENGINE_CONFIG,
        "(EngineCore_DP0 pid=8) INFO 10-26 12:30:02 [gpu_model_runner.py:2602] Starting to load model /models/Qwen3-32B...",
        "(EngineCore_DP0 pid=8) Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.62it/s]",
        "(EngineCore_DP0 pid=8) Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.70it/s]",
        "(EngineCore_DP0 pid=8) INFO 10-26 12:30:09 [default_loader.py:267] Loading weights took 5.81 seconds",
        "(EngineCore_DP0 pid=8) INFO 10-26 12:30:09 [gpu_model_runner.py:2641] Loading drafter model...",
        "(EngineCore_DP0 pid=8) Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]",
        "(EngineCore_DP0 pid=8) Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00,  3.10it/s]",
        "(EngineCore_DP0 pid=8) INFO 10-26 12:30:10 [gpu_model_runner.py:2653] Model loading took 61.5437 GiB and 6.823120 seconds",
        "(EngineCore_DP0 pid=8) INFO 10-26 12:30:40 [kv_cache_utils.py:1087] GPU KV cache size: 80,864 tokens",
        "(EngineCore_DP0 pid=8) INFO 10-26 12:30:40 [kv_cache_utils.py:1091] Maximum concurrency for 40,960 tokens per request: 1.97x",
        "(EngineCore_DP0 pid=8) Capturing CUDA graphs (decode, FULL):  40%|████      | 14/35 [00:01<00:01, 12.0it/s]",
        "(EngineCore_DP0 pid=8) INFO 10-26 12:31:02 [gpu_model_runner.py:3480] Graph capturing finished in 22 secs, took 0.54 GiB",
        "(APIServer pid=7) INFO 10-26 12:31:05 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000",
        "(APIServer pid=7) INFO:     Application startup complete.",
        STATS_011,
        SPEC_B_011,
    ]

    batch = engines.LogFacts(VLLM.grammar, {}).read(1, lines)

    assert batch.progress == 100 and batch.draft_progress == 100
    assert batch.milestones == {
        "server_args", "weights_loading", "weights_loaded", "kv_allocated", "http_started", "ready",
    }  # fmt: skip
    assert batch.server_args is not None and batch.server_args["num_spec_tokens"] == 3
    assert batch.server_facts["limits"] == {
        "max_total_num_tokens": 80864,
        "max_running_requests": None,
        "context_len": None,
    }
    assert batch.server_facts["capture_progress"] == 40
    assert batch.server_facts["graphs_captured"] == [["target", 22.0]]
    assert [point["accept_len"] for point in batch.decode] == [2.01]
    assert batch.failure is None


# --- warnings -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "(EngineCore_DP0 pid=8) WARNING 10-26 12:30:00 [cuda.py:120] Cudagraph is disabled under eager mode",
            "eager_mode",
        ),
        (
            "(EngineCore pid=8) WARNING 11-01 08:00:00 [vllm.py:600] Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none",
            "eager_mode",
        ),
        (
            "(APIServer pid=7) INFO 10-26 12:29:50 [utils.py:233] non-default args: {'model_tag': '/m', 'disable_log_stats': True}",
            "no_log_stats",
        ),
        (
            "(APIServer pid=7) INFO 12-19 10:00:00 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 3, GPU KV cache usage: 99.8%, Prefix cache hit rate: 0.0%",
            "kv_preemption",
        ),
        (
            "(EngineCore pid=8) WARNING 11-01 08:00:00 [vllm.py:3043] The draft model's max_model_len (2048) is smaller than the target model's (131072) and the V2 model runner can't skip speculation for longer sequences; reducing max_model_len to 2048.",
            "max_model_len_reduced",
        ),
        (
            "(EngineCore pid=8) INFO 09-01 08:00:00 [eagle.py:90] Overriding draft model max_position_embeddings from 2048 to the target model's max_model_len (131072); the draft shares the target's positional space.",
            "draft_context_changed",
        ),
        (
            "WARNING 05-02 10:00:00 [arg_utils.py:1600] Speculative Decoding is not supported by the V1 Engine. Falling back to V0. ",
            "v0_fallback",
        ),
        (
            "(APIServer pid=7) WARNING 08-18 10:00:00 [argparse_utils.py:80] argument '--disable-log-requests' is deprecated and replaced with '--enable-log-requests'. This will be removed in v0.12.0.",
            "deprecation",
        ),
        (
            "(APIServer pid=7) WARNING 12-19 10:00:00 [arg_utils.py:60] With `vllm serve`, you should provide the model as a positional argument or in a config file instead of via the `--model` option. The `--model` option will be removed in v0.13.",
            "deprecation",
        ),
        (
            "(EngineCore pid=8) INFO 10-26 12:30:40 [kv_cache_utils.py:1091] Maximum concurrency for 131,072 tokens per request: 0.62x",
            "kv_below_one_request",
        ),
        (
            "(APIServer pid=7) WARNING 10-26 12:29:51 [model.py:1520] User-specified max_model_len (300000) is greater than the derived max_model_len (262144). Make sure the value is correct and within the model context size.",
            "long_max_model_len",
        ),
    ],
)
def test_it_finds_the_warnings_worth_surfacing(line, kind):
    warning = find_warning(line)

    assert warning is not None and warning.kind == kind
    assert find_warning(line) == warning  # the same message every time: a run records it once


@pytest.mark.parametrize(
    "line",
    [
        STATS_011,
        "(APIServer pid=7) INFO 10-26 12:36:26 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, Preemptions: 0, GPU KV cache usage: 1.9%",
        "(EngineCore_DP0 pid=8) INFO 10-26 12:30:40 [kv_cache_utils.py:1091] Maximum concurrency for 40,960 tokens per request: 1.97x",
        "(APIServer pid=7) INFO 10-26 12:29:50 [utils.py:233] non-default args: {'model_tag': '/m', 'disable_log_stats': False}",
        "INFO 10-26 12:00:00 [__init__.py:216] Automatically detected platform cuda.",
        "(EngineCore_DP0 pid=8) INFO 10-26 12:00:00 [__init__.py:10] Reducing Torch parallelism from 64 threads to 1 to avoid unnecessary CPU contention. Set OMP_NUM_THREADS in the external environment to tune this value as needed.",
    ],
)
def test_it_finds_no_warning_in_ordinary_lines(line):
    assert find_warning(line) is None


# --- launch and effective args ------------------------------------------------------------------------------------

EAGLE3 = {
    "model_path": "/models/Llama-3.1-8B-Instruct",
    "served_model_name": "llama",
    "tp_size": 2,
    "speculative_algorithm": "eagle3",
    "speculative_draft_model_path": "/models/EAGLE3-LLaMA3.1-Instruct-8B",
    "speculative_num_steps": 3,
    "engine_options": {"draft_tensor_parallel_size": 1},
    "extra_args": ["--max-model-len", "8192", "--gpu-memory-utilization", "0.9"],
}


def test_it_builds_the_vllm_serve_argv_of_an_eagle3_config():
    argv = VLLM.launch_argv(EAGLE3, host="127.0.0.1", port=8000, adaptive_config="/ignored.json")

    assert argv == [
        "/models/Llama-3.1-8B-Instruct",
        "--served-model-name", "llama",
        "--tensor-parallel-size", "2",
        "--host", "127.0.0.1",
        "--port", "8000",
        "--speculative-config",
        '{"method":"eagle3","model":"/models/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3,"draft_tensor_parallel_size":1}',
        "--max-model-len", "8192", "--gpu-memory-utilization", "0.9",
    ]  # fmt: skip
    assert "--disable-log-stats" not in argv


def test_a_baseline_gets_no_speculative_config_and_a_bad_spec_is_refused():
    baseline = {**EAGLE3, "speculative_algorithm": "", "extra_args": []}

    assert launch_argv(baseline, host="h", port=1) == [
        "/models/Llama-3.1-8B-Instruct", "--served-model-name", "llama", "--tensor-parallel-size", "2",
        "--host", "h", "--port", "1",
    ]  # fmt: skip
    with pytest.raises(ValueError):
        launch_argv({"model_path": ""}, host="h", port=1)
    with pytest.raises(TypeError):
        launch_argv({"model_path": "/m", "extra_args": "--enforce-eager"}, host="h", port=1)


def test_it_names_what_the_server_runs_otherwise_than_asked():
    effective = _logged_args(ENGINE_CONFIG)
    asked = {
        "model_path": "/models/original/Qwen-Qwen3-32B",
        "tp_size": 2,
        "speculative_algorithm": "eagle3",
        "speculative_draft_model_path": "/models/original/RedHatAI-Qwen3-32B-speculator.eagle3",
        "speculative_num_steps": 3,
    }

    assert arg_mismatches(asked, effective) == []
    assert VLLM.arg_mismatches({**asked, "tp_size": 4, "speculative_num_steps": 5}, effective) == [
        "requested tp_size=4, the server runs tensor_parallel_size=2",
        "requested speculative_num_steps=5, the server runs num_spec_tokens=3",
    ]
    # A draft path is shown beside the request but not held to it (the table's `verified`): vLLM may resolve it.
    assert arg_mismatches({**asked, "speculative_draft_model_path": "/other"}, effective) == []


def test_it_asks_for_a_few_greedy_tokens_and_counts_them():
    path, body = VLLM.smoke_request("llama")

    assert path == "/v1/completions"
    assert body == {"model": "llama", "prompt": "The capital city of France is", "max_tokens": 8, "temperature": 0}
    assert (
        VLLM.smoke_tokens('{"choices": [{"text": " Paris."}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}')
        == 3
    )
    assert VLLM.smoke_tokens('{"error": {"message": "The model `x` does not exist."}}') == 0
    assert VLLM.smoke_tokens("not json") == 0


def test_it_warns_of_an_eagle3_draft_served_as_eagle():
    draft = {"architectures": ["LlamaForCausalLMEagle3"]}

    assert "method eagle3" in (VLLM.algorithm_problem("eagle", draft) or "")
    assert VLLM.algorithm_problem("eagle3", draft) is None
    assert VLLM.algorithm_problem("eagle", {"architectures": ["LlamaForCausalLMEagle"]}) is None


def test_it_refuses_a_max_model_len_past_the_target():
    target = {"max_position_embeddings": 131072, "vocab_size": 128256}
    draft = {"max_position_embeddings": 2048, "vocab_size": 128256}
    spec = {"extra_args": ["--max-model-len", "262144"]}

    assert "max_model_len" in (VLLM.model_problem(target, draft, spec=spec, env={}) or "")
    assert VLLM.model_problem(target, draft, spec=spec, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}) is None


def test_it_reads_the_launcher_from_the_host():
    from experiments.models import Host

    host = Host(name="gpu-1", launcher="python3 -m sglang.launch_server", vllm_launcher="/opt/vllm/bin/vllm serve")

    assert VLLM.launcher(host) == "/opt/vllm/bin/vllm serve"
    assert engines.named("sglang").launcher(host) == "python3 -m sglang.launch_server"
