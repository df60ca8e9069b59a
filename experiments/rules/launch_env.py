"""The environment variables a member may give a server, each by its exact name with its value rule, grouped by
what they tune. Pure (no Django). A name not listed here is refused, unless it is in a prefix an admin added for the
host (`Host.extra_env_prefixes`, such as SIMHOST_ for the simulated host's fault knobs).

Never listed, by design: variables that load code or say where code is (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD unpickles
anything, TRITON_KERNEL_OVERRIDE and FLASHINFER_CUBINS_REPOSITORY load kernels from elsewhere, SGLANG_USE_MODELSCOPE
and HF_ENDPOINT fetch models and their code from another server, HF_HUB_OFFLINE=0 from the hub), name files or
directories (HF_*_CACHE, CUDA_MPS_*_DIRECTORY, CUDA_COREDUMP_PIPE), or listen or connect out (NCCL_RAS_ADDR,
NCCL_COMM_ID, GLOO_SOCKET_IFNAME, the KV-transfer engines' MC_* and UCX_*).

vLLM's never listed (its `envs.py`; the reference, §2-§5, names a few): VLLM_PLUGINS loads packages' entry points,
VLLM_ALLOW_INSECURE_SERIALIZATION unpickles, VLLM_LOGGING_STREAM and VLLM_LOGGING_CONFIG_PATH import or read what
they name, VLLM_USE_MODELSCOPE fetches models and code from another hub; VLLM_CONFIG_ROOT, VLLM_CACHE_ROOT,
VLLM_TORCH_PROFILER_DIR, VLLM_RPC_BASE_PATH and every other *_PATH, *_DIR, *_FILE or *_ROOT name a place to read or
write; VLLM_HOST_IP, VLLM_PORT, VLLM_DP_MASTER_IP and VLLM_DP_MASTER_PORT listen or connect out; VLLM_API_KEY
changes who may call the server; VLLM_SERVER_DEV_MODE opens the development endpoints (reference §2.2: /sleep,
/reset_prefix_cache ...) to every caller, VLLM_ALLOW_RUNTIME_LORA_UPDATING lets callers load adapters from paths;
VLLM_PROCESS_NAME_PREFIX renames the `VLLM::EngineCore` title specdash finds the engine by (reference §5), and
VLLM_LOGGING_PREFIX and VLLM_CONFIGURE_LOGGING=0 change the lines specdash reads.
"""

from __future__ import annotations

from .launch_values import BOOL, Choice, Float, Int, Pattern, Rule, Secret, words

_INTERFACES = Pattern(r"[\^=]{0,2}[A-Za-z0-9_.:-]{1,32}(,[A-Za-z0-9_.:-]{1,32}){0,31}", "a list of device names")
_ZERO_ONE = Choice(("0", "1"))
_NAME_LIST = Pattern(r"[A-Za-z0-9_+-]{1,32}(,[A-Za-z0-9_+.-]{1,32}){0,63}", "a comma-separated list of names")

ENV_GROUPS: dict[str, dict[str, Rule]] = {
    # NCCL between the GPUs of the host the run holds.
    "NCCL collectives": {
        "NCCL_PROTO": words("LL", "LL128", "Simple"),
        "NCCL_ALGO": words("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT"),
        "NCCL_DEBUG": Choice(("VERSION", "WARN", "INFO", "TRACE"), ignore_case=True),
        "NCCL_DEBUG_SUBSYS": _NAME_LIST,
        "NCCL_IB_HCA": _INTERFACES,
        "NCCL_IB_DISABLE": BOOL,
        "NCCL_P2P_DISABLE": BOOL,
        "NCCL_SHM_DISABLE": BOOL,
        "NCCL_NVLS_ENABLE": BOOL,
        "NCCL_CUMEM_ENABLE": BOOL,
        "NCCL_P2P_LEVEL": Choice(("LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "0", "1", "2", "3", "4", "5")),
        "NCCL_MIN_NCHANNELS": Int(1, 64),
        "NCCL_MAX_NCHANNELS": Int(1, 64),
        "NCCL_NTHREADS": Int(64, 512),
        "NCCL_BUFFSIZE": Int(65_536, 1 << 30),
        "NCCL_LAUNCH_MODE": Choice(("PARALLEL", "GROUP")),
    },
    "SGLang switches": {
        "SGLANG_ENABLE_SPEC_V2": BOOL,
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": BOOL,
        "SGLANG_HEALTH_CHECK_TIMEOUT": Int(1, 3600),
        "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": BOOL,
        "SGLANG_ENABLE_JIT_DEEPGEMM": BOOL,
        "SGLANG_LOG_MS": BOOL,
        "SGLANG_LOG_FORWARD_ITERS": BOOL,
    },
    # vLLM reads most of its switches with int() (a "true" stops it at import), so they take 0 or 1 only.
    "vLLM switches": {
        # The stats and SpecDecoding lines specdash reads come every interval (default 10 s, reference §3.1):
        # bounded, so a run still logs a line a few times a minute at least, and no faster than once a second.
        "VLLM_LOG_STATS_INTERVAL": Float(1, 60),
        # The lines specdash reads are INFO (reference §3.1): a higher level hides them.
        "VLLM_LOGGING_LEVEL": Choice(("DEBUG", "INFO"), ignore_case=True),
        "VLLM_LOGGING_COLOR": _ZERO_ONE,  # colour codes are stripped whatever it says (reference §2.3)
        "VLLM_DISABLE_LOG_LOGO": _ZERO_ONE,
        "VLLM_ATTENTION_BACKEND": Choice(
            tuple(
                "FLASH_ATTN FLASHINFER TRITON_ATTN FLEX_ATTENTION TREE_ATTN XFORMERS TORCH_SDPA FLASHMLA "
                "FLASH_ATTN_MLA FLASHINFER_MLA CUTLASS_MLA TRITON_MLA FLASH_ATTN_VLLM_V1 TRITON_ATTN_VLLM_V1".split()
            )
        ),
        "VLLM_FLASH_ATTN_VERSION": Choice(("2", "3")),
        "VLLM_USE_FLASHINFER_SAMPLER": _ZERO_ONE,
        "VLLM_USE_V1": _ZERO_ONE,  # 0.8-0.10: V0 has no EAGLE-3 (reference §1.3, §4.4)
        "VLLM_ENABLE_V1_MULTIPROCESSING": _ZERO_ONE,
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN": _ZERO_ONE,  # a --max-model-len above the model's (reference §1.4)
        "VLLM_WORKER_MULTIPROC_METHOD": Choice(("spawn", "fork")),  # reference §5
        "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": _ZERO_ONE,  # reference §4.6
        "VLLM_ENGINE_READY_TIMEOUT_S": Int(1, 3600),  # 0.17+ (reference §2.5)
        "VLLM_ENGINE_ITERATION_TIMEOUT_S": Int(1, 3600),
        "VLLM_RPC_TIMEOUT": Int(1000, 3_600_000),  # milliseconds
        "VLLM_NO_USAGE_STATS": _ZERO_ONE,
        "VLLM_DO_NOT_TRACK": _ZERO_ONE,
    },
    # A set accept length instead of the draft's (SGLang's spec_utils): what a better draft would be worth. Bounded
    # to what a verify step can accept (1 to steps + 1; no server runs more than 32 steps), the methods SGLang knows.
    "simulated acceptance": {
        "SGLANG_SIMULATE_ACC_LEN": Float(1, 33),
        "SGLANG_SIMULATE_ACC_METHOD": Choice(("match-expected", "multinomial")),
        "SGLANG_SIMULATE_ACC_TOKEN_MODE": Choice(("fixed", "real-draft-token")),
    },
    "CUDA and PyTorch runtime": {
        "CUDA_VISIBLE_DEVICES": Pattern(
            r"([0-9]{1,3}|(GPU|MIG)-[0-9A-Fa-f-]{1,64})(,([0-9]{1,3}|(GPU|MIG)-[0-9A-Fa-f-]{1,64})){0,63}",
            "a comma-separated list of GPU indexes or UUIDs",
        ),
        "CUDA_LAUNCH_BLOCKING": BOOL,
        "CUDA_DEVICE_MAX_CONNECTIONS": Int(1, 32),
        "CUDA_DEVICE_ORDER": Choice(("PCI_BUS_ID", "FASTEST_FIRST")),
        "CUDA_MODULE_LOADING": Choice(("LAZY", "EAGER")),
        "PYTORCH_CUDA_ALLOC_CONF": Pattern(
            r"[a-z0-9_]{1,40}:[A-Za-z0-9_.]{1,40}(,[a-z0-9_]{1,40}:[A-Za-z0-9_.]{1,40}){0,15}",
            "allocator settings such as expandable_segments:True",
        ),
        "TORCH_CUDA_ARCH_LIST": Pattern(
            r"[0-9]{1,2}\.[0-9]a?(\+PTX)?([; ][0-9]{1,2}\.[0-9]a?(\+PTX)?){0,15}", "CUDA architectures such as 9.0"
        ),
        "TORCH_NCCL_BLOCKING_WAIT": BOOL,
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": Int(0, 3),
        "TORCH_NCCL_AVOID_RECORD_STREAMS": BOOL,
        "TORCH_USE_CUDA_DSA": BOOL,
        "TORCH_SHOW_CPP_STACKTRACES": BOOL,
        "TORCH_LOGS": Pattern(r"[+-]?[a-z_.]{1,40}(,[+-]?[a-z_.]{1,40}){0,31}", "a list of PyTorch log names"),
        "NVIDIA_TF32_OVERRIDE": Choice(("0", "1")),
        "OMP_NUM_THREADS": Int(1, 1024),
        "TOKENIZERS_PARALLELISM": BOOL,
        "TRITON_PRINT_AUTOTUNING": BOOL,
        "FLASHINFER_LOGLEVEL": Int(0, 5),
    },
    # Offline only: with the hub on, a model path that is not a directory downloads (and may run) what it names.
    "Hugging Face hub": {
        "HF_HUB_OFFLINE": Choice(("1",)),
        "HF_HUB_DISABLE_TELEMETRY": BOOL,
        "HF_TOKEN": Secret(),
    },
    # The timing lines the explanatory model reads (a patched server prints them; the comparison page tells users
    # to set them).
    "EAGLE-3 profiling": {
        "EAGLE3_PROFILE": BOOL,
        "EAGLE3_PROFILE_EVERY": Int(1, 1_000_000),
    },
}

ENV_RULES: dict[str, Rule] = {name: rule for group in ENV_GROUPS.values() for name, rule in group.items()}

# The namespaces of the variables above and of the libraries a server loads. Their names are allowed one by one, so a
# host may not add a prefix that overlaps one (an admin's "HF_" would open HF_ENDPOINT to every member).
ENGINE_ENV_NAMESPACES = frozenset(
    {name.split("_", 1)[0] + "_" for name in ENV_RULES}
    | {"HUGGING", "PYTORCH_", "GLOO_", "UCX_", "MC_", "NVSHMEM_", "MOONCAKE_", "NIXL_", "DG_", "VLLM_"}
)
