"""The SGLang flags a member may add to a config's launch (`extra_args`), each with its value rule, grouped by what
they do. Pure (no Django). A flag not listed here is refused: the list says what a member may tune, not what is
known to be dangerous, so a flag a newer SGLang adds stays refused until someone reads it and lists it.

Never listed, by design: flags that load code (`--trust-remote-code`, `--model-impl`, `--json-model-override-args`,
custom loaders and logit processors), read or write files wherever they say (`--chat-template`, `--ssl-*`,
`--config`, dump and cache folders), listen or connect out (`--dist-init-addr`, `--nnodes`, `--tool-server`,
`--otlp-traces-endpoint`, `--load-format remote`, `--disaggregation-*`), change who may call the server
(`--api-key`, `--admin-api-key`), or take a host's resources without bound (`--tokenizer-worker-num`). An admin who
needs one for a host puts it in that host's launcher.

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
