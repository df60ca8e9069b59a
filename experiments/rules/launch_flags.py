"""The SGLang flags a member may add to a config's launch (`extra_args`), each with its value rule, grouped by what
they do. Pure (no Django). A flag not listed here is refused: the list says what a member may tune, not what is
known to be dangerous, so a flag a newer SGLang adds stays refused until someone reads it and lists it.

Never listed, by design: flags that load code (`--trust-remote-code`, `--model-impl`, `--json-model-override-args`,
custom loaders and logit processors), read or write files wherever they say (`--chat-template`, `--ssl-*`,
`--config`, dump and cache folders), listen or connect out (`--dist-init-addr`, `--nnodes`, `--tool-server`,
`--otlp-traces-endpoint`, `--load-format remote`, `--disaggregation-*`), change who may call the server
(`--api-key`, `--admin-api-key`), or take a host's resources without bound (`--tokenizer-worker-num`). An admin who
needs one for a host puts it in that host's launcher.

A second list, `HOST_FLAG_RULES`, names the flags a member may not set by default but an admin may allow for one
host (`Host.extra_flags`): they take more of the host's CPUs, memory or interconnect than a member's share, or need
something installed there, and each still has a bounded value rule. A flag is in one list at most, so its rule never
depends on the host. `NEVER_FLAGS` says why the worst of the rest can never be allowed, not even by an admin (it is
an explanation, not a gate: every flag outside the two lists is refused whether or not it is named there).

Names are the canonical spelling SGLang's help prints (`--` and lower-case words joined by `-`); argparse's
abbreviations are refused, because which flag an abbreviation names depends on the SGLang version on the host.
"""

from __future__ import annotations

from .launch_values import Choice, Float, Int, Rule, Switch

_BATCH = Int(1, 4096)  # a batch: SGLang's running requests top out in the low thousands
_TOKENS = Int(1, 10_000_000)  # a token count: the longest contexts served are ~10M
_ATTENTION = Choice(
    (
        "flashinfer",
        "triton",
        "torch_native",
        "flex_attention",
        "fa3",
        "fa4",
        "flashmla",
        "cutlass_mla",
        "trtllm_mla",
        "trtllm_mha",
        "aiter",
        "wave",
        "intel_amx",
        "ascend",
        "dual_chunk_flash_attn",
        "nsa",
    )
)
_QUANTIZATION = Choice(
    tuple(
        "fp8 awq awq_marlin gptq gptq_marlin marlin modelopt modelopt_fp4 w8a8_int8 w8a8_fp8 moe_wna16 "
        "compressed-tensors mxfp4 bitsandbytes".split()
    )
)
_GRAPH_BACKEND = Choice(("full", "breakable", "disabled"))
_LOG_LEVEL = Choice(("debug", "info", "warning", "error", "critical"))

FLAG_GROUPS: dict[str, dict[str, Rule]] = {
    "memory and batching": {
        "--mem-fraction-static": Float(0.05, 0.99),
        "--max-running-requests": _BATCH,
        "--max-total-tokens": _TOKENS,
        "--max-prefill-tokens": _TOKENS,
        "--chunked-prefill-size": Int(-1, 1_048_576),  # -1 turns chunking off
        "--context-length": _TOKENS,
        "--page-size": Int(1, 1024),
        "--kv-cache-dtype": Choice(("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")),
        "--schedule-policy": Choice(("lpm", "random", "fcfs", "dfs-weight", "lof", "priority")),
        "--schedule-conservativeness": Float(0.01, 10),
        "--disable-radix-cache": Switch(),
        "--enable-mixed-chunk": Switch(),
        "--stream-interval": Int(1, 1000),
    },
    "CUDA graphs and compilation": {
        "--cuda-graph-max-bs": _BATCH,
        "--cuda-graph-max-bs-decode": _BATCH,
        "--cuda-graph-max-bs-prefill": _BATCH,
        "--disable-cuda-graph": Switch(),
        "--disable-cuda-graph-padding": Switch(),
        "--disable-decode-cuda-graph": Switch(),
        "--disable-prefill-cuda-graph": Switch(),
        "--cuda-graph-backend-decode": _GRAPH_BACKEND,
        "--cuda-graph-backend-prefill": _GRAPH_BACKEND,
        "--enable-torch-compile": Switch(),
        "--torch-compile-max-bs": _BATCH,
        "--disable-overlap-schedule": Switch(),
    },
    "kernels and numerics": {
        "--attention-backend": _ATTENTION,
        "--decode-attention-backend": _ATTENTION,
        "--prefill-attention-backend": _ATTENTION,
        "--speculative-draft-attention-backend": _ATTENTION,
        "--sampling-backend": Choice(("flashinfer", "pytorch")),
        "--dtype": Choice(("auto", "half", "float16", "bfloat16", "float", "float32")),
        "--quantization": _QUANTIZATION,
        "--random-seed": Int(0, 2**31 - 1),
        "--enable-deterministic-inference": Switch(),
    },
    "speculative decoding (beyond the config's own fields)": {
        "--speculative-attention-mode": Choice(("prefill", "decode")),
        "--speculative-accept-threshold-single": Float(0, 1),
        "--speculative-accept-threshold-acc": Float(0, 1),
        # The steps move with the batch size (SGLang 0.5.23, EAGLE/EAGLE3 at topk 1). Its schedule file,
        # --speculative-adaptive-config, names a path: specdash writes and ships that file itself, a member never
        # names one (a path read wherever it says is the kind of flag this list never takes).
        "--speculative-adaptive": Switch(),
    },
    # Within one host: more processes on the GPUs the run holds, never another node.
    "parallelism on the host's GPUs": {
        "--dp-size": Int(1, 64),
        "--pp-size": Int(1, 64),
        "--ep-size": Int(1, 64),
        "--enable-dp-attention": Switch(),
    },
    "logs and metrics": {
        "--log-level": _LOG_LEVEL,
        "--log-level-http": _LOG_LEVEL,
        "--log-requests": Switch(),
        "--log-requests-level": Int(0, 3),
        "--decode-log-interval": Int(1, 100_000),
        "--enable-metrics": Switch(),
        "--enable-cache-report": Switch(),
        "--show-time-cost": Switch(),
        "--skip-server-warmup": Switch(),
    },
    "reading the model's output": {
        "--reasoning-parser": Choice(
            ("deepseek-r1", "deepseek-v3", "qwen3", "qwen3-thinking", "glm45", "kimi", "step3", "gpt-oss", "minimax")
        ),
        "--tool-call-parser": Choice(
            ("llama3", "qwen25", "qwen3_coder", "mistral", "deepseekv3", "pythonic", "kimi_k2", "glm45", "gpt-oss")
        ),
        "--tokenizer-mode": Choice(("auto", "slow")),
    },
    # Bounded: a watchdog that never fires keeps a hung server (and its GPUs) forever.
    "timeouts": {
        "--watchdog-timeout": Float(10, 3600),
    },
}

FLAG_RULES: dict[str, Rule] = {flag: rule for group in FLAG_GROUPS.values() for flag, rule in group.items()}

# Allowed by an admin for one host (`Host.extra_flags`), never by a member alone. Every one is a flag of
# `sglang.launch_server` that the simulated host accepts too (simhost/args.py), so an allowance can be tried there.
HOST_FLAG_GROUPS: dict[str, dict[str, Rule]] = {
    # More processes on the host's CPUs, beside the run's GPUs: the host's other tenants share those cores.
    "processes on the host's CPUs": {
        "--tokenizer-worker-num": Int(1, 16),
    },
    # Requests held waiting in the server's memory: bounded, but a host with little RAM may say no.
    "queues": {
        "--max-queued-requests": Int(1, 100_000),
    },
    # The interconnect and the collectives libraries: NVLink SHARP (NVLS) takes the switch's multicast resources,
    # shared by every job on the node; MSCCL++ and the memory saver must be installed on the host and change how
    # memory is held, which the teardown's nvidia-smi check relies on.
    "interconnect and memory on the host": {
        "--enable-nccl-nvls": Switch(),
        "--enable-mscclpp": Switch(),
        "--disable-custom-all-reduce": Switch(),
        "--enable-p2p-check": Switch(),
        "--enable-memory-saver": Switch(),
    },
    # One metrics exporter per scheduler (needed with DP attention, else every rank reads as TP0).
    "metrics": {
        "--enable-metrics-for-all-schedulers": Switch(),
    },
}

HOST_FLAG_RULES: dict[str, Rule] = {flag: rule for group in HOST_FLAG_GROUPS.values() for flag, rule in group.items()}

_LOADS_CODE = "loads code into the server"
_READS_FILES = "reads or writes files wherever it says"
_NETWORK = "listens or connects out"
_CALLERS = "changes who may call the server"
# Why these are never settable in a config, whoever asks (the admin's host form and a member's refusal say so).
NEVER_FLAGS: dict[str, str] = {
    "--trust-remote-code": _LOADS_CODE,
    "--model-impl": _LOADS_CODE,
    "--json-model-override-args": _LOADS_CODE,
    "--model-loader-extra-config": _LOADS_CODE,
    "--custom-weight-loader": _LOADS_CODE,
    "--enable-custom-logit-processor": _LOADS_CODE,
    "--load-format": _LOADS_CODE,
    "--chat-template": _READS_FILES,
    "--completion-template": _READS_FILES,
    "--tokenizer-path": _READS_FILES,
    "--speculative-token-map": _READS_FILES,
    "--speculative-adaptive-config": _READS_FILES,
    "--ssl-keyfile": _READS_FILES,
    "--ssl-certfile": _READS_FILES,
    "--ssl-ca-certs": _READS_FILES,
    "--config": _READS_FILES,
    "--download-dir": _READS_FILES,
    "--file-storage-path": _READS_FILES,
    "--crash-dump-folder": _READS_FILES,
    "--export-metrics-to-file-dir": _READS_FILES,
    "--host": _NETWORK,
    "--port": _NETWORK,
    "--nccl-port": _NETWORK,
    "--dist-init-addr": _NETWORK,
    "--nnodes": _NETWORK,
    "--node-rank": _NETWORK,
    "--tool-server": _NETWORK,
    "--enable-trace": _NETWORK,
    "--otlp-traces-endpoint": _NETWORK,
    "--revision": _NETWORK,
    "--disaggregation-mode": _NETWORK,
    "--disaggregation-bootstrap-port": _NETWORK,
    "--disaggregation-transfer-backend": _NETWORK,
    "--disaggregation-ib-device": _NETWORK,
    "--api-key": _CALLERS,
    "--admin-api-key": _CALLERS,
}
