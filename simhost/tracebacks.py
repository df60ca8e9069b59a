"""Text of the fake SGLang tracebacks and failure messages the scheduler prints (pure functions, no I/O)."""

from __future__ import annotations

from simhost import versions

SGLANG = "/usr/local/lib/python3.12/dist-packages/sglang/srt"


def _tb(frames: list[tuple[str, int, str, str]], error: str) -> str:
    body = "".join(
        f'  File "{path if path.startswith("/") else f"{SGLANG}/{path}"}", line {line}, in {func}\n    {code}\n'
        for path, line, func, code in frames
    )
    return f"Traceback (most recent call last):\n{body}{error}"


_INIT_FRAMES = [
    ("managers/scheduler.py", 3049, "run_scheduler_process", "scheduler = Scheduler("),
    ("managers/scheduler.py", 350, "__init__", "self.init_model_worker()"),
    ("managers/scheduler.py", 540, "init_model_worker", "self.maybe_init_draft_worker()"),
]


def context_error_traceback(target_len: int, derived: int) -> str:
    frames = [
        *_INIT_FRAMES,
        ("managers/scheduler.py", 512, "maybe_init_draft_worker", "self.draft_worker = DraftWorkerClass("),
        ("speculative/eagle_worker.py", 115, "__init__", "super().__init__("),
        ("managers/tp_worker.py", 88, "__init__", "self._init_model_config()"),
        (
            "managers/tp_worker.py",
            145,
            "_init_model_config",
            "self.model_config = ModelConfig.from_server_args(",
        ),
        ("configs/model_config.py", 243, "from_server_args", "return ModelConfig("),
        ("configs/model_config.py", 160, "__init__", "self._derive_context_length(context_length)"),
        ("configs/model_config.py", 329, "_derive_context_length", "raise ValueError("),
    ]
    return _tb(
        frames,
        f"ValueError: {context_message(True, target_len, derived)} To allow overriding this "
        "maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
    )


def nextn_traceback() -> str:
    """NEXTN (EAGLE on the target's own checkpoint) on a target whose config has no MTP layer
    (`num_nextn_predict_layers` != 1): the DeepSeek model's `load_weights(is_nextn=True)` assertion, raised while
    the draft worker loads its weights. Frame lines are illustrative (the reference has no real log of it)."""
    frames = [
        *_INIT_FRAMES,
        ("managers/scheduler.py", 512, "maybe_init_draft_worker", "self.draft_worker = DraftWorkerClass("),
        ("speculative/eagle_worker.py", 115, "__init__", "super().__init__("),
        ("managers/tp_worker.py", 96, "__init__", "self.model_runner = ModelRunner("),
        ("model_executor/model_runner.py", 345, "__init__", "self.initialize(min_per_gpu_memory)"),
        ("model_executor/model_runner.py", 420, "initialize", "self.load_model()"),
        ("model_executor/model_runner.py", 801, "load_model", "self.model = get_model("),
        ("models/deepseek_nextn.py", 170, "load_weights", "super().load_weights(weights, is_nextn=True)"),
        (
            "models/deepseek_v2.py",
            2705,
            "load_weights",
            'assert num_nextn_layers == 1, "Only 1 nextn layer is supported"',
        ),
    ]
    return _tb(frames, "AssertionError: Only 1 nextn layer is supported")


def standalone_vocab_traceback(target_vocab: int, draft_vocab: int) -> str:
    """STANDALONE with a draft of another vocabulary, once SGLang checks it (PR #23838, merged mid-2026: simhost
    gives it to 0.5.23 only, a guess at the release); before, the server starts and every accepted draft token is
    wrong (issue #24051)."""
    frames = [
        *_INIT_FRAMES,
        ("managers/scheduler.py", 512, "maybe_init_draft_worker", "self.draft_worker = DraftWorkerClass("),
        ("speculative/standalone_worker.py", 96, "__init__", "self._validate_vocab_compatibility("),
        ("speculative/standalone_worker.py", 131, "_validate_vocab_compatibility", "raise ValueError("),
    ]
    return _tb(
        frames,
        "ValueError: STANDALONE speculative decoding requires the draft model to share the same vocabulary as the "
        f"target model, but got target vocab_size={target_vocab} and draft vocab_size={draft_vocab}. Use a draft "
        "model with a matching vocabulary, or a speculative algorithm that supports heterogeneous vocabularies.",
    )


def context_message(is_draft: bool, context_len: int, derived: int) -> str:
    reason = "Target model's" if is_draft else "User-specified"
    return (
        f"Warning: {reason} context_length ({context_len}) is greater than the derived context_length "
        f"({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
        "context_length may differ from max_position_embeddings in the model's config."
    )


def oom_traceback(rank: int, ver: versions.Version) -> str:
    removed = ver.cuda_graph_max_bs_flag == "removed"
    item2 = "--cuda-graph-max-bs-decode" if removed else "--cuda-graph-max-bs"
    item4 = (
        "disable decode CUDA graph by --cuda-graph-backend-decode=disabled."
        if removed
        else "disable CUDA graph by --disable-cuda-graph."
    )
    frames = [
        ("managers/scheduler.py", 3049, "run_scheduler_process", "scheduler = Scheduler("),
        ("managers/scheduler.py", 350, "__init__", "self.init_model_worker()"),
        ("managers/scheduler.py", 528, "init_model_worker", "self.tp_worker = TpModelWorker("),
        ("managers/tp_worker.py", 121, "__init__", "self._model_runner = ModelRunner("),
        ("model_executor/model_runner.py", 366, "__init__", "self.initialize(min_per_gpu_memory)"),
        ("model_executor/model_runner.py", 532, "initialize", "self.init_device_graphs()"),
        (
            "model_executor/model_runner.py",
            2150,
            "init_device_graphs",
            "self.graph_runner = graph_runners[self.device](self)",
        ),
        ("model_executor/cuda_graph_runner.py", 398, "__init__", "raise Exception("),
    ]
    return _tb(
        frames,
        (
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. "
            f"GPU {rank} has a total capacity of 139.81 GiB of which 1.12 GiB is free. Including non-PyTorch memory, "
            "this process has 138.68 GiB memory in use. Of the allocated memory 131.40 GiB is allocated by PyTorch, "
            "and 1.51 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
            "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
            "Possible solutions:\n"
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
            f"2. set {item2} to a smaller value (e.g., 16)\n"
            "3. disable torch compile by not using --enable-torch-compile\n"
            f"4. {item4} (Not recommended. Huge performance loss)\n"
            "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose "
        ),
    )


def memory_traceback(mfs: float) -> str:
    frames = [
        ("managers/scheduler.py", 3049, "run_scheduler_process", "scheduler = Scheduler("),
        ("managers/scheduler.py", 350, "__init__", "self.init_model_worker()"),
        ("managers/scheduler.py", 528, "init_model_worker", "self.tp_worker = TpModelWorker("),
        ("managers/tp_worker.py", 121, "__init__", "self._model_runner = ModelRunner("),
        ("model_executor/model_runner.py", 366, "__init__", "self.initialize(min_per_gpu_memory)"),
        ("model_executor/model_runner.py", 501, "initialize", "self.init_memory_pool("),
        ("model_executor/model_runner.py", 1843, "init_memory_pool", "raise RuntimeError("),
    ]
    return _tb(
        frames,
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: self.server_args.mem_fraction_static={mfs}",
    )


def device_traceback() -> str:
    frames = [
        ("managers/scheduler.py", 3049, "run_scheduler_process", "scheduler = Scheduler("),
        ("managers/scheduler.py", 350, "__init__", "self.init_model_worker()"),
        ("managers/scheduler.py", 528, "init_model_worker", "self.tp_worker = TpModelWorker("),
        ("managers/tp_worker.py", 121, "__init__", "self._model_runner = ModelRunner("),
        (
            "model_executor/model_runner.py",
            330,
            "__init__",
            "torch.get_device_module(self.device).set_device(self.gpu_id)",
        ),
    ]
    return _tb(
        frames,
        "RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be "
        "asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    )


def request_crash_traceback(speculative: bool) -> str:
    frames = [
        ("managers/scheduler.py", 3114, "run_scheduler_process", "scheduler.event_loop_normal()"),
        (
            "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py",
            120,
            "decorate_context",
            "return func(*args, **kwargs)",
        ),
        ("managers/scheduler.py", 1061, "event_loop_normal", "result = self.run_batch(batch)"),
        (
            "managers/scheduler.py",
            2283,
            "run_batch",
            "batch_result = self.model_worker.forward_batch_generation(batch_or_worker_batch)",
        ),
    ]
    if speculative:
        frames += [
            (
                "speculative/eagle_worker.py",
                289,
                "forward_batch_generation",
                "logits_output, next_token_ids, seq_lens_cpu = self.forward_target_extend(",
            ),
            (
                "speculative/eagle_worker.py",
                332,
                "forward_target_extend",
                "batch_result = self.target_worker.forward_batch_generation(model_worker_batch)",
            ),
        ]
    frames += [
        (
            "managers/tp_worker.py",
            397,
            "forward_batch_generation",
            "logits_output, can_run_cuda_graph = self.model_runner.forward(",
        ),
        ("model_executor/model_runner.py", 2270, "forward", "output = self._forward_raw("),
        ("model_executor/model_runner.py", 2331, "_forward_raw", "ret = self.forward_extend("),
        ("models/deepseek_v2.py", 2987, "forward", "hidden_states = self.model("),
        ("models/deepseek_v2.py", 2790, "forward", "num_tokens = hidden_states.shape[0]"),
    ]
    return _tb(frames, "AttributeError: 'NoneType' object has no attribute 'shape'")


def simulated_acceptance_traceback(error: str) -> str:
    """A misconfigured SGLANG_SIMULATE_ACC_METHOD / _TOKEN_MODE: the ValueError of the first verify step."""
    frames = [
        ("managers/scheduler.py", 3114, "run_scheduler_process", "scheduler.event_loop_normal()"),
        ("managers/scheduler.py", 1061, "event_loop_normal", "result = self.run_batch(batch)"),
        (
            "managers/scheduler.py",
            2283,
            "run_batch",
            "batch_result = self.model_worker.forward_batch_generation(batch_or_worker_batch)",
        ),
        ("speculative/eagle_worker.py", 301, "forward_batch_generation", "self.verify(batch, spec_info)"),
        ("speculative/eagle_info.py", 402, "verify", "accept_index = generate_simulated_accept_index("),
        (
            "speculative/spec_utils.py",
            612,
            "generate_simulated_accept_index",
            "simulate_acc_len = _sample_simulated_acc_len(",
        ),
        ("speculative/spec_utils.py", 590, "_sample_simulated_acc_len", "raise ValueError("),
    ]
    return _tb(frames, f"ValueError: {error}")


def asgi_exception_traceback() -> str:
    """What uvicorn logs when a request handler raises (here: the client closed the stream); the server serves on."""
    frames = [
        (
            "/usr/local/lib/python3.12/dist-packages/uvicorn/protocols/http/httptools_impl.py",
            409,
            "run_asgi",
            "result = await app(  # type: ignore[func-returns-value]",
        ),
        (
            "/usr/local/lib/python3.12/dist-packages/starlette/responses.py",
            262,
            "__call__",
            "await wrap(partial(self.stream_response, send))",
        ),
        (
            "/usr/local/lib/python3.12/dist-packages/starlette/responses.py",
            254,
            "stream_response",
            'await send({"type": "http.response.body", "body": chunk, "more_body": True})',
        ),
    ]
    return _tb(frames, "starlette.requests.ClientDisconnect")


def profile_error_traceback(message: str) -> str:
    """What uvicorn logs when /start_profile or /stop_profile is refused: the tokenizer manager raises the
    scheduler's message as a RuntimeError."""
    frames = [
        (
            "entrypoints/http_server.py",
            1123,
            "start_profile_async",
            "await _global_state.tokenizer_manager.start_profile(",
        ),
        ("managers/tokenizer_communicator_mixin.py", 402, "start_profile", "raise RuntimeError(result.message)"),
    ]
    return _tb(frames, f"RuntimeError: {message}")
