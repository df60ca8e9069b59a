"""The vLLM flags a member may add to a config's launch (`extra_args` after `vllm serve MODEL`), each with its value
rule, grouped by what they do: vLLM's counterpart of `launch_flags`, read the same way by `launch_policy`. Pure (no
Django). A flag not listed here is refused: the list says what a member may tune, not what is known to be
dangerous, so a flag a newer vLLM adds stays refused until someone reads it and lists it.

Never listed, by design: flags that load code (`--trust-remote-code`, `--hf-overrides`, `--compilation-config`,
loaders, logits processors, worker classes, middleware, parser plugins), read or write files wherever they say
(`--chat-template`, `--tokenizer`, `--download-dir`, `--config`, `--ssl-*`, `--allowed-local-media-path`), listen or
connect out (`--host`, `--port`, `--headless`, `--data-parallel-address`, `--kv-transfer-config`,
`--otlp-traces-endpoint`, `--distributed-executor-backend ray`, revisions fetched from the hub), change who may call
the server (`--api-key`, `--root-path`, CORS), or blind specdash (`--disable-log-stats` turns off the SpecDecoding
lines and every `vllm:*` metric the benchmark reads, reference §1.4). An admin who needs one for a host puts it in
that host's launcher.

`HOST_FLAG_RULES` names the flags an admin may allow for one host (`Host.extra_flags`), as for SGLang: more API
server processes on the host's CPUs, the host's RAM, and how the interconnect and GPU memory are held. A flag is in
one list at most, so its rule never depends on the host: `--max-num-seqs` is a member's with one bound (it spends
only the run's own KV cache, which `--gpu-memory-utilization` caps), not a member's below a bound and a host's above.

vLLM's parser takes more spellings than SGLang's (reference §1.2, §1.4): underscores for hyphens, dotted keys of a
JSON flag (`--speculative-config.method`), and short forms (`-tp`, `-sc`, `-O3`). Only the canonical spelling is
listed here; `SHORT_FLAGS` maps each short form to its flag so a refusal can say what it stands for.

Where reference/vllm-interface.md is silent (most value lists below: its §1.4 table names a dozen flags), the names,
choices and versions are from vLLM's `engine/arg_utils.py` and `entrypoints/openai/cli_args.py` as remembered, a
guess: a wrong choice fails the launch with argparse's "invalid choice", it never opens anything.
"""

from __future__ import annotations

from .launch_values import Choice, Float, Int, Rule, Switch

_BATCH = Int(1, 4096)  # running sequences: vLLM's default is 1024 on a GPU of 70 GiB or more (reference §1.4)
_TOKENS = Int(1, 10_000_000)  # a token count: the longest contexts served are ~10M
_LOG_LEVEL = Choice(("critical", "error", "warning", "info", "debug"))
# vLLM's quantization methods that need nothing but the checkpoint (a guess from 0.11's QUANTIZATION_METHODS).
# Left out: torchao (its config builds objects by class name), gguf (a file format: the model path says it), and
# the platform-specific ones.
_QUANTIZATION = Choice(
    tuple(
        "fp8 fbgemm_fp8 awq awq_marlin gptq gptq_marlin marlin modelopt modelopt_fp4 compressed-tensors bitsandbytes "
        "moe_wna16 experts_int8 mxfp4".split()
    )
)

FLAG_GROUPS: dict[str, dict[str, Rule]] = {
    "memory and batching": {
        # A fraction of the GPU's total memory, checked against free memory at startup (reference §1.4, §4.2).
        "--gpu-memory-utilization": Float(0.05, 0.99),
        # Plain digits only: vLLM also reads "32k" here, and the value checked must be the value the server reads.
        "--max-model-len": _TOKENS,
        "--max-num-seqs": _BATCH,
        "--max-num-batched-tokens": _TOKENS,
        "--enable-chunked-prefill": Switch(),
        "--no-enable-chunked-prefill": Switch(),
        "--enable-prefix-caching": Switch(),
        "--no-enable-prefix-caching": Switch(),
        "--block-size": Choice(("1", "8", "16", "32", "64", "128")),
        "--kv-cache-dtype": Choice(("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),
        # Pinned host memory per GPU (default 4 GiB; gone in later versions, reference §1.4's "--swap-space 0"):
        # bounded to twice the default, as the host's RAM is shared.
        "--swap-space": Float(0, 8),
        "--scheduling-policy": Choice(("fcfs", "priority")),
        # 0.11 refuses it with speculative decoding (reference §4.4); a baseline may use it.
        "--async-scheduling": Switch(),
    },
    "CUDA graphs and compilation": {
        "--enforce-eager": Switch(),
        # 0.13+ (`-O<n>` is its short form, reference §1.4). The JSON of --compilation-config is never listed: its
        # keys name a backend and passes to import by name, and folders to write.
        "--optimization-level": Choice(("0", "1", "2", "3")),
        # 0.10-0.11: one value is the largest batch captured; 0.13+ renamed it --max-cudagraph-capture-size.
        "--cuda-graph-sizes": _BATCH,
        "--max-cudagraph-capture-size": _BATCH,
    },
    "kernels and numerics": {
        "--dtype": Choice(("auto", "half", "float16", "bfloat16", "float", "float32")),
        "--quantization": _QUANTIZATION,
        "--seed": Int(0, 2**31 - 1),
    },
    "speculative decoding (beyond the config's own fields)": {
        # 0.30+: acceptance figures in each response's metrics (reference §6).
        "--per-request-spec-decode-metrics": Choice(("none", "summary", "detailed")),
    },
    # Within one host: more processes on the GPUs the run holds, never another node.
    "parallelism on the host's GPUs": {
        "--pipeline-parallel-size": Int(1, 64),
        "--data-parallel-size": Int(1, 64),
        "--enable-expert-parallel": Switch(),
    },
    "logs and metrics": {
        "--enable-log-requests": Switch(),  # 0.10+
        # 0.10-0.16, deprecated; 0.17+ stops at "unrecognized arguments" (reference §1.4).
        "--disable-log-requests": Switch(),
        "--max-log-len": Int(0, 1_000_000),
        "--uvicorn-log-level": _LOG_LEVEL,
        "--enable-server-load-tracking": Switch(),  # /load counts in-flight requests (reference §2.2)
    },
    "reading the model's output": {
        "--max-logprobs": Int(0, 100_000),
        "--reasoning-parser": Choice(
            ("deepseek_r1", "deepseek_v3", "qwen3", "glm45", "gpt_oss", "granite", "mistral", "step3", "seed_oss")
        ),
        "--tool-call-parser": Choice(
            ("hermes", "llama3_json", "mistral", "pythonic", "qwen3_coder", "deepseek_v3", "kimi_k2", "glm45", "openai")
        ),
        "--enable-auto-tool-choice": Switch(),
        "--tokenizer-mode": Choice(("auto", "slow", "mistral")),
        # The model's generation_config.json or vLLM's defaults; a folder (the flag's third form) is a path.
        "--generation-config": Choice(("auto", "vllm")),
    },
}

FLAG_RULES: dict[str, Rule] = {flag: rule for group in FLAG_GROUPS.values() for flag, rule in group.items()}

# Allowed by an admin for one host (`Host.extra_flags`), never by a member alone.
HOST_FLAG_GROUPS: dict[str, dict[str, Rule]] = {
    # More API server processes (`VLLM::APIServer_i`, reference §5) on the host's CPUs, which its other tenants
    # share; they also move the metrics into multiprocess Prometheus.
    "processes on the host's CPUs": {
        "--api-server-count": Int(1, 16),
    },
    # Weights held in the host's RAM instead of the GPUs': a host with little RAM may say no.
    "memory on the host": {
        "--cpu-offload-gb": Float(0, 1024),
    },
    # The interconnect and how GPU memory is held: sleep mode swaps vLLM's allocator (CuMemAllocator), which the
    # teardown's nvidia-smi check relies on; custom all-reduce off moves TP traffic to NCCL, as SGLang's host flag.
    "interconnect and memory on the host": {
        "--disable-custom-all-reduce": Switch(),
        "--enable-sleep-mode": Switch(),
    },
}

HOST_FLAG_RULES: dict[str, Rule] = {flag: rule for group in HOST_FLAG_GROUPS.values() for flag, rule in group.items()}

_LOADS_CODE = "loads code into the server"
_READS_FILES = "reads or writes files wherever it says"
_NETWORK = "listens or connects out"
_CALLERS = "changes who may call the server"
_BLINDS = "turns off the statistics and metrics specdash measures a run with"
# Why these are never settable in a config, whoever asks (the admin's host form and a member's refusal say so).
NEVER_FLAGS: dict[str, str] = {
    "--trust-remote-code": _LOADS_CODE,
    "--hf-overrides": _LOADS_CODE,  # can rename the architecture, and so the code that runs it
    "--model-impl": _LOADS_CODE,
    "--load-format": _LOADS_CODE,  # remote and custom loaders
    "--model-loader-extra-config": _LOADS_CODE,
    "--compilation-config": _LOADS_CODE,
    "--logits-processors": _LOADS_CODE,
    "--logits-processor-pattern": _LOADS_CODE,
    "--worker-cls": _LOADS_CODE,
    "--worker-extension-cls": _LOADS_CODE,
    "--scheduler-cls": _LOADS_CODE,
    "--tool-parser-plugin": _LOADS_CODE,
    "--reasoning-parser-plugin": _LOADS_CODE,
    "--io-processor-plugin": _LOADS_CODE,
    "--middleware": _LOADS_CODE,
    "--enable-prompt-embeds": "has the server deserialise tensors its callers send",
    "--distributed-executor-backend": "connects to a Ray cluster or loads an executor class by name",
    "--chat-template": _READS_FILES,
    "--tokenizer": _READS_FILES,
    "--hf-config-path": _READS_FILES,
    "--download-dir": _READS_FILES,
    "--config": _READS_FILES,
    "--log-config-file": _READS_FILES,
    "--lora-modules": _READS_FILES,
    "--allowed-local-media-path": _READS_FILES,
    "--ssl-keyfile": _READS_FILES,
    "--ssl-certfile": _READS_FILES,
    "--ssl-ca-certs": _READS_FILES,
    "--enable-ssl-refresh": _READS_FILES,
    "--host": _NETWORK,
    "--port": _NETWORK,
    "--uds": _NETWORK,
    "--headless": _NETWORK,
    "--nnodes": _NETWORK,
    "--node-rank": _NETWORK,
    "--master-addr": _NETWORK,
    "--master-port": _NETWORK,
    "--data-parallel-address": _NETWORK,
    "--data-parallel-rpc-port": _NETWORK,
    "--data-parallel-backend": _NETWORK,
    "--kv-transfer-config": _NETWORK,
    "--kv-events-config": _NETWORK,
    "--otlp-traces-endpoint": _NETWORK,
    "--allowed-media-domains": _NETWORK,
    "--revision": _NETWORK,
    "--tokenizer-revision": _NETWORK,
    "--code-revision": _NETWORK,
    "--hf-token": "puts a credential on the command line, where every process listing shows it (HF_TOKEN does not)",
    "--api-key": _CALLERS,
    "--ssl-cert-reqs": _CALLERS,
    "--root-path": _CALLERS,
    "--allowed-origins": _CALLERS,
    "--disable-log-stats": _BLINDS,
}

# vLLM's short forms, to the flag each stands for: -tp, -O, -cc, -sc and -asc are the reference's (§1.2, §1.4; -O
# is --compilation-config's in 0.10-0.11 and --optimization-level's from 0.13, which is what a host runs now); the
# others are a guess from arg_utils. Every short form is refused: a refusal names the flag it stands for.
SHORT_FLAGS: dict[str, str] = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-dpl": "--data-parallel-size-local",
    "-dpa": "--data-parallel-address",
    "-dpb": "--data-parallel-backend",
    "-dcp": "--decode-context-parallel-size",
    "-ep": "--enable-expert-parallel",
    "-q": "--quantization",
    "-O": "--optimization-level",
    "-cc": "--compilation-config",
    "-sc": "--speculative-config",
    "-asc": "--api-server-count",
}
