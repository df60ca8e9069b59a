"""The fake vLLM tracebacks and failure texts (pure). The exception lines are the reference's (§4); the frames above
them are shaped like vLLM 0.11's call paths but are the simulator's own (the reference quotes no whole traceback)."""

from __future__ import annotations

from simhost.vllm.versions import VllmVersion

SITE = "/usr/local/lib/python3.12/dist-packages"


def traceback(frames: list[tuple[str, int, str, str]], final: str) -> str:
    """`Traceback (most recent call last):` + frames (file under vllm/, line, function, source) + the final line(s)."""
    body = "".join(
        f'  File "{SITE}/{path}", line {line}, in {func}\n    {source}\n' for path, line, func, source in frames
    )
    return f"Traceback (most recent call last):\n{body}{final}"


def api_server_frames() -> list[tuple[str, int, str, str]]:
    return [
        ("vllm/entrypoints/cli/main.py", 54, "main", "args.dispatch_function(args)"),
        ("vllm/entrypoints/cli/serve.py", 57, "cmd", "uvloop.run(run_server(args))"),
        (
            "vllm/entrypoints/openai/api_server.py",
            1884,
            "run_server",
            "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
        ),
        ("vllm/entrypoints/openai/api_server.py", 1902, "run_server_worker", "async with build_async_engine_client("),
    ]


def config_traceback(final: str) -> str:
    """A config-time error, raised in the API server before any engine process exists (§4.1)."""
    frames = [
        *api_server_frames(),
        (
            "vllm/entrypoints/openai/api_server.py",
            180,
            "build_async_engine_client_from_engine_args",
            "vllm_config = engine_args.create_engine_config(usage_context=usage_context)",
        ),
        (
            "vllm/engine/arg_utils.py",
            1338,
            "create_engine_config",
            "speculative_config = self.create_speculative_config(",
        ),
    ]
    return traceback(frames, final)


def engine_init_failed(ver: VllmVersion, exitcode: int) -> str:
    """The API server's end of a failed engine start (§4.1 step 3)."""
    frames = [
        *api_server_frames(),
        ("vllm/v1/engine/core_client.py", 727, "__init__", "super().__init__("),
        ("vllm/v1/engine/utils.py", 880, "wait_for_engine_startup", "raise RuntimeError("),
    ]
    if not ver.at_least("0.9.2"):
        return traceback(frames, "RuntimeError: Engine core initialization failed. See root cause above.")
    failed = {ver.engine_core_name: exitcode}
    return traceback(
        frames,
        f"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {failed}",
    )


def engine_core_frames() -> list[tuple[str, int, str, str]]:
    return [
        ("vllm/v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
        ("vllm/v1/engine/core.py", 498, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
        ("vllm/v1/engine/core.py", 92, "__init__", "self._initialize_kv_caches(vllm_config)"),
    ]


def worker_start_failed() -> str:
    """EngineCore's exception when a TP worker failed to start (§4.1 step 1)."""
    frames = [
        *engine_core_frames()[:2],
        ("vllm/v1/engine/core.py", 83, "__init__", "self.model_executor = executor_class(vllm_config)"),
        (
            "vllm/v1/executor/multiproc_executor.py",
            106,
            "_init_executor",
            "self.workers = WorkerProc.wait_for_ready(unready_workers)",
        ),
        ("vllm/v1/executor/multiproc_executor.py", 509, "wait_for_ready", "raise e from None"),
    ]
    return traceback(
        frames,
        "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace "
        "for root cause.",
    )


def out_of_memory(
    gpu_index: int, total_gib: float, free_mib: float, held_gib: float, tried_mib: float, where: str
) -> tuple[str, list[tuple[str, int, str, str]]]:
    """PyTorch's CUDA OOM text (real, vllm#27508, with this process's numbers) and frames for `where` (load or
    capture or sampler)."""
    allocated = max(held_gib - 0.98, 0.0)
    final = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried_mib:.2f} MiB. GPU {gpu_index} has a "
        f"total capacity of {total_gib:.2f} GiB of which {max(free_mib, 0):.2f} MiB is free. Including non-PyTorch "
        f"memory, this process has {held_gib:.2f} GiB memory in use. Of the allocated memory {allocated:.2f} GiB is "
        "allocated by PyTorch, with 660.00 MiB allocated in private pools (e.g., CUDA Graphs), and 331.08 MiB is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    frames = {
        "load": [
            ("vllm/v1/worker/gpu_model_runner.py", 2602, "load_model", "self.model = model_loader.load_model("),
            (
                "vllm/model_executor/model_loader/base_loader.py",
                49,
                "load_model",
                "self.load_weights(model, model_config)",
            ),
            (
                "vllm/model_executor/model_loader/default_loader.py",
                259,
                "load_weights",
                "loaded_weights = model.load_weights(",
            ),
        ],
        "capture": [
            (
                "vllm/v1/worker/gpu_worker.py",
                342,
                "compile_or_warm_up_model",
                "cuda_graph_memory_bytes = self.model_runner.capture_model()",
            ),
            ("vllm/v1/worker/gpu_model_runner.py", 3480, "capture_model", "self._capture_cudagraphs("),
        ],
        "sampler": [
            ("vllm/v1/worker/gpu_worker.py", 380, "compile_or_warm_up_model", "self.model_runner._dummy_sampler_run("),
            ("vllm/v1/worker/gpu_model_runner.py", 2980, "_dummy_sampler_run", "raise RuntimeError("),
        ],
    }[where]
    return final, frames


def sampler_oom(num_reqs: int) -> str:
    return (
        f"RuntimeError: CUDA out of memory occurred when warming up sampler with {num_reqs} dummy requests. Please "
        "try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
    )


def free_memory(ver: VllmVersion, gpu_index: int, free: float, total: float, util: float) -> str:
    device = f" cuda:{gpu_index}" if ver.free_memory_names_device else ""
    return (
        f"ValueError: Free memory on device{device} ({free:.2f}/{total:.2f} GiB) on startup is less than desired GPU "
        f"memory utilization ({util}, {util * total:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory "
        "used by other processes."
    )


def no_cache_blocks(ver: VllmVersion) -> str:
    text = (
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine."
    )
    if ver.no_cache_blocks_hint:
        text += (
            " (this flag also controls CPU memory reservation on the CPU backend, despite its name). See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        )
    return text


def max_seq_len_too_long(ver: VllmVersion, max_len: int, needed_gib: float, avail_gib: float, estimate: int) -> str:
    models = "models's" if ver.models_typo else "model's"
    return (
        f"ValueError: To serve at least one request with the {models} max seq len ({max_len}), ({needed_gib:.2f} GiB "
        f"KV cache is needed, which is larger than the available KV cache memory ({avail_gib:.2f} GiB). Based on the "
        f"available memory, the estimated maximum model length is {estimate}. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )


def tp_too_large(ver: VllmVersion, tp: int, gpus: int) -> str:
    if ver.tp_too_large == "ray":
        return (
            "ValueError: Unable to load Ray: No module named 'ray'. Ray is required for multi-node inference, "
            "please install Ray with `pip install ray`."
        )
    return (
        f"ValueError: World size ({tp}) is larger than the number of available GPUs ({gpus}) in this node. If this "
        "is intentional and you are using:\n- ray, set '--distributed-executor-backend ray'.\n- multiprocessing, "
        "set '--nnodes' appropriately."
    )


def request_crash() -> str:
    """What a crash on a request looks like inside EngineCore (the simulator's choice of root cause: SGLang's
    crash_on_first_request raises the same AttributeError)."""
    frames = [
        ("vllm/v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()"),
        ("vllm/v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()"),
        ("vllm/v1/engine/core.py", 754, "_process_engine_step", "outputs, model_executed = self.step_fn()"),
        (
            "vllm/v1/engine/core.py",
            353,
            "step_with_batch_queue",
            "model_output = self.execute_model_with_error_logging(",
        ),
        (
            "vllm/v1/spec_decode/eagle.py",
            214,
            "propose",
            "last_token_indices = common_attn_metadata.query_start_loc[1:] - 1",
        ),
    ]
    return traceback(frames, "AttributeError: 'NoneType' object has no attribute 'shape'")


def engine_dead() -> str:
    frames = [
        ("vllm/v1/engine/async_llm.py", 439, "output_handler", "outputs = await engine_core.get_output_async()"),
        ("vllm/v1/engine/core_client.py", 846, "get_output_async", "raise self._format_exception(outputs) from None"),
    ]
    return traceback(
        frames,
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
        "the root cause.",
    )


def port_in_use(host: str, port: int) -> str:
    frames = [
        *api_server_frames()[:3],
        ("vllm/entrypoints/openai/api_server.py", 1850, "setup_server", "sock = create_server_socket(sock_addr)"),
        ("vllm/entrypoints/openai/api_server.py", 1812, "create_server_socket", "sock.bind(addr)"),
    ]
    return traceback(frames, "OSError: [Errno 98] Address already in use")
