# Log lines are quoted verbatim, however long.
# ruff: noqa: E501
"""The vLLM failure finder on failure logs shaped as ../shared/reference/vllm-interface.md §4 tells them (its quoted
texts and real fragments; the frames between are the reference's call paths), and the vLLM reading against the
simulated vLLM server (`python -m simhost.vllm_serve`): the line shapes simhost builds for every version it imitates,
and whole logs of started, serving and failed servers read the way the run lifecycle reads them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from simhost.ports import free_port
from simhost.tests.conftest import DRAFT, REPO, TARGET, Server
from simhost.vllm import lines as sim_lines
from simhost.vllm import tracebacks as sim_tracebacks
from simhost.vllm.versions import SUPPORTED, VllmVersion
from workers import engines
from workers.engines.facts import FAILURE_KINDS, ServerArgsDump, ServerLimits
from workers.vllm import find_failure, find_usage_error, parse_line, parse_step_line, split_prefix
from workers.vllm.adapter import VLLM

# --- the failure corpus -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    log: str
    kind: str
    messages: tuple[str, ...]
    first: str  # the excerpt's first and last line (stripped)
    last: str
    finder: str = "find_failure"


EC = "(EngineCore_DP0 pid=8884) ERROR 10-26 12:30:41 [core.py:708] "
AP = "(APIServer pid=8870) "
API_WRAPPER = f"""{AP}Traceback (most recent call last):
{AP}  File "/usr/local/bin/vllm", line 8, in <module>
{AP}    sys.exit(main())
{AP}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py", line 880, in wait_for_engine_startup
{AP}    raise RuntimeError(
{AP}RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{'EngineCore_DP0': 1}}"""
OOM_TEXT = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 140.75 MiB is free. Process 3270336 has 78.96 GiB memory in use. Of the allocated memory 68.83 GiB is allocated by PyTorch, with 660.00 MiB allocated in private pools (e.g., CUDA Graphs), and 331.08 MiB is reserved by PyTorch but unallocated."

CASES = [
    Case(
        "oom_root_cause_above_the_wrapper",
        f"""(EngineCore_DP0 pid=8884) INFO 10-26 12:30:40 [gpu_worker.py:298] Available KV cache memory: 9.87 GiB
{EC}EngineCore failed to start.\r
{EC}Traceback (most recent call last):\r
{EC}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 699, in run_engine_core\r
{EC}    engine_core = EngineCoreProc(*args, **kwargs)\r
{EC}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 3480, in capture_model\r
{EC}    self._capture_cudagraphs(\r
{EC}{OOM_TEXT}\r
(EngineCore_DP0 pid=8884) Process EngineCore_DP0:
(EngineCore_DP0 pid=8884) Traceback (most recent call last):
(EngineCore_DP0 pid=8884)   File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap
(EngineCore_DP0 pid=8884)     self.run()
(EngineCore_DP0 pid=8884) {OOM_TEXT}
{API_WRAPPER}""",
        "oom",
        ("CUDA out of memory. Tried to allocate 786.00 MiB",),
        "(EngineCore_DP0 pid=8884) ERROR 10-26 12:30:41 [core.py:708] Traceback (most recent call last):",
        f"{EC}{OOM_TEXT}".strip(),
    ),
    Case(
        "nccl_error_in_a_worker_above_the_wrapper",
        f"""(Worker pid=5121) ERROR 04-18 09:00:01 [multiproc_executor.py:600] WorkerProc failed to start.
(Worker pid=5121) ERROR 04-18 09:00:01 [multiproc_executor.py:600] Traceback (most recent call last):
(Worker pid=5121) ERROR 04-18 09:00:01 [multiproc_executor.py:600]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 700, in init_worker_distributed_environment
(Worker pid=5121) ERROR 04-18 09:00:01 [multiproc_executor.py:600]     ensure_model_parallel_initialized(
(Worker pid=5121) ERROR 04-18 09:00:01 [multiproc_executor.py:600] RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)
(EngineCore pid=5100) ERROR 04-18 09:00:02 [core.py:708] EngineCore failed to start.
(EngineCore pid=5100) ERROR 04-18 09:00:02 [core.py:708] Traceback (most recent call last):
(EngineCore pid=5100) ERROR 04-18 09:00:02 [core.py:708]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 509, in wait_for_ready
(EngineCore pid=5100) ERROR 04-18 09:00:02 [core.py:708]     raise e from None
(EngineCore pid=5100) ERROR 04-18 09:00:02 [core.py:708] Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.
{API_WRAPPER.replace("'EngineCore_DP0'", "'EngineCore'")}""",
        "crashed",
        ("RuntimeError: NCCL error: unhandled system error",),
        "(Worker pid=5121) ERROR 04-18 09:00:01 [multiproc_executor.py:600] Traceback (most recent call last):",
        "(Worker pid=5121) ERROR 04-18 09:00:01 [multiproc_executor.py:600] RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
    ),
    Case(
        "only_the_wrapper_left_in_the_window",
        API_WRAPPER,
        "crashed",
        ("Engine core initialization failed. See root cause above.",),
        f"{AP}Traceback (most recent call last):",
        f"{AP}RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{'EngineCore_DP0': 1}}",
    ),
    Case(
        "free_memory_at_start_era_e",
        """(EngineCore pid=77) ERROR 11-01 08:00:05 [core.py:708] EngineCore failed to start.
(EngineCore pid=77) ERROR 11-01 08:00:05 [core.py:708] Traceback (most recent call last):
(EngineCore pid=77) ERROR 11-01 08:00:05 [core.py:708]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/utils.py", line 120, in request_memory
(EngineCore pid=77) ERROR 11-01 08:00:05 [core.py:708]     raise ValueError(
(EngineCore pid=77) ERROR 11-01 08:00:05 [core.py:708] ValueError: Free memory on device cuda:0 (3.22/79.11 GiB) on startup is less than desired GPU memory utilization (0.9, 71.20 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.
Process EngineCore:
Traceback (most recent call last):
  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap
ValueError: Free memory on device cuda:0 (3.22/79.11 GiB) on startup is less than desired GPU memory utilization (0.9, 71.20 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.""",
        "oom",
        ("Free memory on device cuda:0 (3.22/79.11 GiB) on startup",),
        "(EngineCore pid=77) ERROR 11-01 08:00:05 [core.py:708] Traceback (most recent call last):",
        "(EngineCore pid=77) ERROR 11-01 08:00:05 [core.py:708] ValueError: Free memory on device cuda:0 (3.22/79.11 GiB) on startup is less than desired GPU memory utilization (0.9, 71.20 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
    ),
    Case(
        "kv_cache_smaller_than_one_request_era_a",
        """ERROR 07-07 10:00:30 [core.py:515] EngineCore failed to start.
ERROR 07-07 10:00:30 [core.py:515] Traceback (most recent call last):
ERROR 07-07 10:00:30 [core.py:515]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line 540, in check_enough_kv_cache_memory
ERROR 07-07 10:00:30 [core.py:515]     raise ValueError(
ERROR 07-07 10:00:30 [core.py:515] ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.87 GiB). Based on the available memory, the estimated maximum model length is 80864. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
ERROR 07-07 10:00:31 [core_client.py:564] Engine core proc EngineCore_0 died unexpectedly, shutting down client.""",
        "oom",
        ("the estimated maximum model length is 80864",),
        "ERROR 07-07 10:00:30 [core.py:515] Traceback (most recent call last):",
        "ERROR 07-07 10:00:30 [core.py:515] ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.87 GiB). Based on the available memory, the estimated maximum model length is 80864. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    ),
    Case(
        "max_model_len_past_the_model",
        f"""{AP}Traceback (most recent call last):
{AP}  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 1100, in create_model_config
{AP}    return ModelConfig(
{AP}pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
{AP}  Value error, User-specified max_model_len (262144) is greater than the derived max_model_len (max_position_embeddings=131072 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. [type=value_error, input_value=ArgsKwargs((), {{}}), input_type=ArgsKwargs]
{AP}    For further information visit https://errors.pydantic.dev/2.11/v/value_error""",
        "context_length",
        ("User-specified max_model_len (262144) is greater than the derived max_model_len",),
        f"{AP}Traceback (most recent call last):",
        f"{AP}    For further information visit https://errors.pydantic.dev/2.11/v/value_error",
    ),
    Case(
        "draft_max_model_len_past_the_draft",
        f"""{AP}Traceback (most recent call last):
{AP}  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 1338, in create_engine_config
{AP}    speculative_config = self.create_speculative_config(
{AP}pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
{AP}  Value error, speculative_max_model_len=5000 cannot be larger than draft_max_model_len=2048 [type=value_error, input_value=ArgsKwargs((), {{'max_model_len': 5000}}), input_type=ArgsKwargs]
{AP}    For further information visit https://errors.pydantic.dev/2.11/v/value_error""",
        "context_length",
        ("speculative_max_model_len=5000 cannot be larger than draft_max_model_len=2048",),
        f"{AP}Traceback (most recent call last):",
        f"{AP}    For further information visit https://errors.pydantic.dev/2.11/v/value_error",
    ),
    Case(
        "unknown_speculative_config_key",
        f"""{AP}Traceback (most recent call last):
{AP}  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 1338, in create_engine_config
{AP}    speculative_config = self.create_speculative_config(
{AP}pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
{AP}topk
{AP}  Unexpected keyword argument [type=unexpected_keyword_argument, input_value=4, input_type=int]
{AP}    For further information visit https://errors.pydantic.dev/2.11/v/unexpected_keyword_argument""",
        "misconfigured",
        ("1 validation error for SpeculativeConfig; topk; Unexpected keyword argument",),
        f"{AP}Traceback (most recent call last):",
        f"{AP}    For further information visit https://errors.pydantic.dev/2.11/v/unexpected_keyword_argument",
        finder="find_usage_error",
    ),
    Case(
        "unrecognized_argument",
        """usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...
vllm: error: unrecognized arguments: --disable-log-requests""",
        "misconfigured",
        ("unrecognized arguments: --disable-log-requests",),
        "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...",
        "vllm: error: unrecognized arguments: --disable-log-requests",
        finder="find_usage_error",
    ),
    Case(
        "engine_death_while_serving",
        """(APIServer pid=8870) INFO:     127.0.0.1:40084 - "POST /v1/completions HTTP/1.1" 200 OK
(EngineCore_DP0 pid=8884) ERROR 10-26 13:00:00 [core.py:790] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=8884) ERROR 10-26 13:00:00 [core.py:790] Traceback (most recent call last):
(EngineCore_DP0 pid=8884) ERROR 10-26 13:00:00 [core.py:790]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 781, in run_engine_core
(EngineCore_DP0 pid=8884) ERROR 10-26 13:00:00 [core.py:790]     engine_core.run_busy_loop()
(EngineCore_DP0 pid=8884) ERROR 10-26 13:00:00 [core.py:790] torch.AcceleratorError: CUDA error: an illegal memory access was encountered
(APIServer pid=8870) ERROR 10-26 13:00:00 [async_llm.py:480] AsyncLLM output_handler failed.
(APIServer pid=8870) ERROR 10-26 13:00:00 [async_llm.py:480] Traceback (most recent call last):
(APIServer pid=8870) ERROR 10-26 13:00:00 [async_llm.py:480]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py", line 439, in output_handler
(APIServer pid=8870) ERROR 10-26 13:00:00 [async_llm.py:480]     outputs = await engine_core.get_output_async()
(APIServer pid=8870) ERROR 10-26 13:00:00 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
(APIServer pid=8870) INFO:     Shutting down""",
        "crashed",
        ("CUDA error: an illegal memory access was encountered",),
        "(EngineCore_DP0 pid=8884) ERROR 10-26 13:00:00 [core.py:790] Traceback (most recent call last):",
        "(EngineCore_DP0 pid=8884) ERROR 10-26 13:00:00 [core.py:790] torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    ),
    Case(
        "killed_by_the_host_oom_killer_while_loading",
        """(EngineCore_DP0 pid=8884) Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:20<00:30, 10.0s/it]
Killed""",
        "host_oom",
        ("Out of host memory",),
        "Killed",
        "Killed",
    ),
    Case(
        "engine_start_timed_out",
        """(APIServer pid=12) ERROR 11-01 08:10:00 [core_client.py:766] Timed out waiting for engine core processes to start. This is often caused by slow weight loading for large models. Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S).""",
        "crashed",
        ("Timed out waiting for engine core processes to start",),
        "(APIServer pid=12) ERROR 11-01 08:10:00 [core_client.py:766] Timed out waiting for engine core processes to start. This is often caused by slow weight loading for large models. Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S).",
        "(APIServer pid=12) ERROR 11-01 08:10:00 [core_client.py:766] Timed out waiting for engine core processes to start. This is often caused by slow weight loading for large models. Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S).",
    ),
    # Each method's own refusals (vllm/config/speculative.py; texts from code, the frames as §4.1 places them).
    Case(
        "ngram_lookup_min_above_max",
        f"""{AP}Traceback (most recent call last):
{AP}  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 1338, in create_engine_config
{AP}    speculative_config = self.create_speculative_config(
{AP}pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
{AP}  Value error, prompt_lookup_min=6 must be <= prompt_lookup_max=3 [type=value_error, input_value=ArgsKwargs((), {{'method': 'ngram'}}), input_type=ArgsKwargs]
{AP}    For further information visit https://errors.pydantic.dev/2.11/v/value_error""",
        "misconfigured",
        ("prompt_lookup_min=6 must be <= prompt_lookup_max=3",),
        f"{AP}Traceback (most recent call last):",
        f"{AP}    For further information visit https://errors.pydantic.dev/2.11/v/value_error",
    ),
    Case(
        "suffix_without_arctic_inference",
        f"""{AP}Traceback (most recent call last):
{AP}  File "/usr/local/lib/python3.12/dist-packages/vllm/config/speculative.py", line 402, in __post_init__
{AP}    self._validate_suffix_decoding()
{AP}  File "/usr/local/lib/python3.12/dist-packages/vllm/config/speculative.py", line 611, in _validate_suffix_decoding
{AP}    raise ImportError(
{AP}ImportError: Arctic Inference is required for suffix decoding. Install via `pip install arctic-inference==0.1.1`.""",
        "misconfigured",
        ("Arctic Inference is required for suffix decoding",),
        f"{AP}Traceback (most recent call last):",
        f"{AP}ImportError: Arctic Inference is required for suffix decoding. Install via `pip install arctic-inference==0.1.1`.",
        finder="find_usage_error",
    ),
    Case(
        "draft_model_vocabulary",
        f"""{EC}EngineCore failed to start.
{EC}Traceback (most recent call last):
{EC}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/spec_decode/draft_model.py", line 75, in __init__
{EC}    raise ValueError(
{EC}ValueError: Target and draft model should have the same vocabulary size. Target model vocab_size=151936. Draft model vocab_size=32000. Using models with different tokenizers can cause out-of-bounds errors during speculative decoding.
{API_WRAPPER}""",
        "misconfigured",
        ("Target model vocab_size=151936. Draft model vocab_size=32000",),
        f"{EC}Traceback (most recent call last):",
        f"{EC}ValueError: Target and draft model should have the same vocabulary size. Target model vocab_size=151936. Draft model vocab_size=32000. Using models with different tokenizers can cause out-of-bounds errors during speculative decoding.",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_it_reads_each_failure_like_an_expert(case: Case):
    log = case.log.split("\n")
    finder = find_usage_error if case.finder == "find_usage_error" else find_failure

    failure = finder(log)

    assert failure is not None
    assert failure.kind == case.kind and case.kind in (*FAILURE_KINDS, "misconfigured")
    for expected in case.messages:
        assert expected in failure.message
    assert log[failure.first_line].strip() == case.first
    assert log[failure.last_line].strip() == case.last


def test_a_refused_speculative_config_is_found_before_the_process_exits():
    """The run asks `find_failure` while the server lives: a config refused at start is a misconfiguration then too."""
    log = next(case for case in CASES if case.name == "unknown_speculative_config_key").log.split("\n")

    failure = find_failure(log)

    assert failure is not None and failure.kind == "misconfigured"


def test_a_log_without_a_failure_proves_none():
    log = [
        "(APIServer pid=1) INFO 10-26 12:36:26 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 47.4 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.9%, Prefix cache hit rate: 37.2%",
        "(APIServer pid=1) INFO:     Application startup complete.",
    ]

    assert find_failure(log) is None and find_usage_error(log) is None


# --- simhost's line shapes, every version it imitates ---------------------------------------------------------------


@pytest.mark.parametrize("version", SUPPORTED)
def test_it_reads_the_lines_simhost_builds_for_each_version(version: str):
    ver = VllmVersion.parse(version)
    api = sim_lines.process_prefix("APIServer", 4, colour=True) if ver.prefix_style == "wrapper" else ""
    if ver.prefix_style == "formatter":
        api = sim_lines.process_prefix("APIServer", 4, colour=False)
    core = api.replace("APIServer", ver.engine_core_name) if api else ""

    def logged(prefix: str, where: str, message: str) -> str:
        return sim_lines.format_record(prefix, sim_lines.log_head("INFO", where, 1_790_000_000.0), message).rstrip("\n")

    stats = logged(api, "loggers.py:127", sim_lines.stats_line(ver, 10.0, 512.0, 8, 2, 0.25, 0.5))
    spec = logged(api, "metrics.py:96", sim_lines.spec_line(ver, 100, 300, 150, [80, 50, 20], 10.0))
    config = logged(
        core,
        "core.py:77",
        sim_lines.engine_config_line(
            ver,
            model=TARGET,
            served_model_name="kimi",
            max_seq_len=262144,
            tp=8,
            enforce_eager=False,
            speculative=sim_lines.speculative_config_repr("eagle3", DRAFT, 3),
            seed=None,
        ),
    )
    kv = [logged(core, "kv_cache_utils.py:1087", text) for text in sim_lines.kv_cache_lines(ver, 822_213, 262_144)]

    assert split_prefix(stats)[1] is not None
    assert VLLM.grammar.step_marker in spec and VLLM.grammar.step_marker not in stats
    parsed = parse_step_line(spec)
    assert parsed is not None
    assert parsed[1].accept_len == 2.5 and parsed[1].accept_rate == 0.5
    assert parsed[1].gen_throughput == pytest.approx(25.0)  # (150 accepted + 100 drafts) over 10 s
    assert not VLLM.grammar.prefill_was_idle(stats)
    dump = parse_line(config)
    assert isinstance(dump, ServerArgsDump)
    assert (dump.args["tensor_parallel_size"], dump.args["max_seq_len"], dump.args["served_model_name"]) == (
        8,
        262144,
        "kimi",
    )
    assert (dump.args["method"], dump.args["model"], dump.args["num_spec_tokens"]) == ("eagle3", DRAFT, 3)
    assert parse_line(kv[0]) == ServerLimits(822_213, None, 262_144 if ver.combined_kv_line else None)


@pytest.mark.parametrize("version", ["0.9.2", "0.11.0", "0.33.0"])
def test_it_finds_the_root_cause_of_simhost_s_failure_texts(version: str):
    ver = VllmVersion.parse(version)
    failed = [
        *sim_tracebacks.traceback([], sim_tracebacks.no_cache_blocks(ver)).split("\n"),
        *sim_tracebacks.engine_init_failed(ver, 1).split("\n"),
    ]

    failure = find_failure(failed)

    assert failure is not None and failure.kind == "oom"
    assert failure.message.startswith("ValueError: No available memory for the cache blocks.")
    assert failure.first_line == 0


# --- whole logs of simulated servers ------------------------------------------------------------------------------


def start_vllm(tmp: Path, *flags: str, env: dict[str, str] | None = None) -> Server:
    """`python -m simhost.vllm_serve MODEL ...` as specdash launches a server: its own session, stdout and stderr in
    one log file."""
    port = free_port()
    full_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SIMHOST_LOAD_SECONDS": "0.2",
        "SIMHOST_STATE_DIR": str(tmp / "state"),
        "SIMHOST_SPEED": "0",
        "VLLM_LOG_STATS_INTERVAL": "0.3",
        **(env or {}),
    }
    log = tmp / f"vllm-{port}.log"
    argv = [sys.executable, "-m", "simhost.vllm_serve", TARGET, "--port", str(port), *flags]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=tmp, start_new_session=True
        )
    return Server(proc, port, log, full_env)


def stop(server: Server) -> None:
    server.signal_group(signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(5)


class Http:
    """The server's HTTP API as the run's `ServerApi` answers the adapter (`workers.engines.ServerHttp`), over aiohttp
    to the simulated server's own port (no SSH forward to go through)."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session, self.base = session, base

    async def get_json(self, path: str) -> dict[str, Any] | None:
        async with self.session.get(self.base + path) as response:
            return await response.json() if response.status == 200 else None

    async def get_text(self, path: str) -> str | None:
        async with self.session.get(self.base + path) as response:
            return await response.text() if response.status == 200 else None

    async def post(self, path: str) -> int | None:
        async with self.session.post(self.base + path) as response:
            return response.status

    async def generate(self, path: str, body: dict[str, Any]) -> str:
        async with self.session.post(self.base + path, json=body) as response:
            assert response.status == 200
            return await response.text()


EAGLE3 = json.dumps({"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 3})
BIG_GPU = {"SIMHOST_GPU_MEMORY_MIB": "700000"}  # one simulated GPU the whole target fits on


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, list[str], list[int | None]]]:
    """One EAGLE-3 server of the newest era (0.33.0, TP 2 on GPUs the target fits on, development endpoints on) that
    served a few requests:
    its log, and what the adapter's calls answered (smoke tokens, the reset's status, without and with dev mode)."""
    tmp = tmp_path_factory.mktemp("vllm")
    server = start_vllm(
        tmp,
        "-tp",
        "2",
        "--speculative-config",
        EAGLE3,
        env={"SIMHOST_VLLM_VERSION": "0.33.0", "VLLM_SERVER_DEV_MODE": "1", **BIG_GPU},
    )
    try:
        server.wait_for(r"^INFO:     Application startup complete\.$")
        answers = asyncio.run(_serve(server))
        server.wait_for(r"SpecDecoding metrics: ")
        server.wait_for(r"Running: 0 reqs")
        yield server, server.text().split("\n"), answers
    finally:
        stop(server)


async def _serve(server: Server) -> list[int | None]:
    async with aiohttp.ClientSession() as session:
        http = Http(session, server.base)
        path, body = VLLM.smoke_request(TARGET)
        tokens = VLLM.smoke_tokens(await http.generate(path, body))
        prompt = {"model": TARGET, "prompt": "one two three four five", "max_tokens": 48, "temperature": 0}
        await asyncio.gather(*(http.generate("/v1/completions", prompt) for _ in range(6)))
        reset = await VLLM.reset_between_cells(http)
        accept = await VLLM.server_accept_length(http)
        assert accept is None
        return [tokens, reset]


def test_the_simulated_server_s_startup_reads_as_the_run_reads_it(served):
    _, log, _ = served

    batch = engines.LogFacts(VLLM.grammar, {}).read(1, log)

    # No graph_capture milestone: the capture bar's first state shares its line with the last (tqdm's `\r`).
    assert batch.milestones >= {
        "server_args",
        "weights_loading",
        "weights_loaded",
        "kv_allocated",
        "http_started",
        "ready",
    }
    assert batch.progress == 100 and batch.failure is None
    args = batch.server_args or {}
    assert (args["tensor_parallel_size"], args["method"], args["model"], args["num_spec_tokens"]) == (
        2,
        "eagle3",
        DRAFT,
        3,
    )
    assert args["model_path"] == TARGET
    limits = batch.server_facts["limits"]
    assert limits["max_total_num_tokens"] > 0 and limits["context_len"] == 262144
    assert batch.server_facts["capture_progress"] == 100
    assert batch.server_facts["graphs_captured"] == [["target", 0.0]]


def test_the_simulated_server_s_spec_decoding_lines_are_the_step_points(served):
    _, log, _ = served

    batch = engines.LogFacts(VLLM.grammar, {}).read(1, log)
    summary = engines.decode_summary(VLLM.grammar, 1, log)

    assert batch.decode and all(1.0 <= point["accept_len"] <= 4.0 for point in batch.decode)
    assert all(point["gen_throughput"] > 0 for point in batch.decode)
    assert summary["lines"] == len(batch.decode) and summary["mean_accept_len"] is not None


def test_the_adapter_s_requests_are_answered_by_the_simulated_server(served):
    _, log, (tokens, reset) = served

    assert tokens == 8
    assert reset == 200  # VLLM_SERVER_DEV_MODE=1 serves /reset_prefix_cache
    assert (
        VLLM.arg_mismatches(
            {"model_path": TARGET, "tp_size": 2, "speculative_algorithm": "eagle3", "speculative_num_steps": 3},
            engines.LogFacts(VLLM.grammar, {}).read(1, log).server_args or {},
        )
        == []
    )


async def test_an_eager_server_past_its_length_warns_and_serves_no_reset_without_development_mode(tmp_path):
    env = {"SIMHOST_VLLM_VERSION": "0.33.0", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", **BIG_GPU}
    server = start_vllm(tmp_path, "--enforce-eager", "--max-model-len", "300000", env=env)
    try:
        server.wait_for(r"^INFO:     Application startup complete\.$")
        async with aiohttp.ClientSession() as session:
            status = await VLLM.reset_between_cells(Http(session, server.base))
        log = server.text().split("\n")
    finally:
        stop(server)

    batch = engines.LogFacts(VLLM.grammar, {}).read(1, log)

    assert status == 404
    assert batch.failure is None and find_failure(log) is None
    assert [warning.kind for warning, _, _ in batch.server_warnings] == ["long_max_model_len", "eager_mode"]
    assert (batch.server_args or {})["enforce_eager"] is True
    assert batch.server_facts["limits"]["context_len"] == 300000


@pytest.mark.parametrize(
    ("version", "flags", "env", "finder", "kind", "message"),
    [
        (
            "0.11.0",
            ["-tp", "8", "--speculative-config", EAGLE3],
            {},
            "find_failure",
            "misconfigured",
            "Eagle3 is only supported for ['llama', 'qwen', 'minicpm', 'gpt_oss'] models",
        ),
        ("0.33.0", ["--foo", "1"], {}, "find_usage_error", "misconfigured", "unrecognized arguments: --foo 1"),
        ("0.11.0", ["-tp", "2"], {}, "find_failure", "oom", "torch.OutOfMemoryError: CUDA out of memory"),
        (
            "0.33.0",
            ["--gpu-memory-utilization", "0.8"],
            BIG_GPU,
            "find_failure",
            "oom",
            "No available memory for the cache blocks",
        ),
        (
            "0.9.2",
            ["--gpu-memory-utilization", "0.825"],
            BIG_GPU,
            "find_failure",
            "oom",
            "To serve at least one request with the models's max seq len (262144)",
        ),
    ],
)
def test_it_finds_what_failed_a_simulated_start(tmp_path, version, flags, env, finder, kind, message):
    server = start_vllm(tmp_path, *flags, env={"SIMHOST_VLLM_VERSION": version, **env})
    try:
        assert server.proc.wait(30) in (1, 2)
        log = server.text().split("\n")
    finally:
        stop(server)

    failure = (find_usage_error if finder == "find_usage_error" else find_failure)(log)

    assert failure is not None and failure.kind == kind, failure
    assert message in failure.message
    if "Engine core initialization failed" in "\n".join(log):
        assert "Engine core initialization failed" not in failure.message  # the root cause above it


async def test_an_eagle3_draft_served_as_eagle_by_an_era_a_server_raises_the_live_alarm(tmp_path):
    """0.9.2 (era A: bare API and engine lines, cyan worker prefixes, format A): simhost's server accepts nothing from an
    EAGLE3 head served with method "eagle"; the adapter says so before launch and the alarm while it benchmarks."""
    draft = json.loads((Path(DRAFT) / "config.json").read_text())
    eagle = json.dumps({"method": "eagle", "model": DRAFT, "num_speculative_tokens": 2})
    server = start_vllm(
        tmp_path, "-tp", "2", "--speculative-config", eagle, env={"SIMHOST_VLLM_VERSION": "0.9.2", **BIG_GPU}
    )
    try:
        server.wait_for(r"^INFO:     Application startup complete\.$")
        async with aiohttp.ClientSession() as session:
            http = Http(session, server.base)
            prompt = {"model": TARGET, "prompt": "one two three", "max_tokens": 24, "temperature": 0}
            # One SpecDecoding line per stats interval (0.3 s here) with drafts: requests until three are logged.
            for _ in range(20):
                await asyncio.gather(*(http.generate("/v1/completions", prompt) for _ in range(2)))
                await asyncio.sleep(0.35)
                if server.text().count("SpecDecoding metrics: ") >= 3:
                    break
        log = server.text().split("\n")
    finally:
        stop(server)
    facts = engines.LogFacts(VLLM.grammar, {})
    watch = engines.AcceptanceWatch(diagnosis=VLLM.algorithm_problem("eagle", draft) or "", step_lines=VLLM.step_lines)

    batch = facts.read(1, log)
    alarm = watch.feed(batch.decode)

    assert batch.server_args is not None and batch.server_args["method"] == "eagle"
    assert [point["accept_len"] for point in batch.decode][:3] == [1.0, 1.0, 1.0]
    assert alarm is not None and alarm.kind == "acceptance_collapse"
    assert "an EAGLE3 draft" in alarm.message and "SpecDecoding lines in a row" in alarm.message
