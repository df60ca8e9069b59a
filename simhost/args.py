"""Command line of `python -m simhost.launch_server`: SGLang 0.5.9 flag names, defaults and resolution rules.

One table drives both the argparse parser and the `ServerArgs` dataclass, so `/server_info` and the
`server_args=ServerArgs(...)` log line always show exactly what the parser accepted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from simhost import knobs

_STR: dict[str, Any] = {"type": str}
_INT: dict[str, Any] = {"type": int}
_FLOAT: dict[str, Any] = {"type": float}
_TRUE: dict[str, Any] = {"action": "store_true"}
SPEC_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]

# (field, default, extra flag aliases, argparse kwargs, help). Order follows SGLang's ServerArgs, which is
# the order of the dataclass repr in the log.
_FIELDS: list[tuple[str, Any, list[str], dict[str, Any], str]] = [
    (
        "model_path",
        None,
        ["--model"],
        {"type": str, "required": True},
        "Model directory (holds config.json).",
    ),
    ("tokenizer_path", None, [], _STR, "Tokenizer path; defaults to the model path."),
    ("tokenizer_mode", "auto", [], _STR, "Tokenizer mode (accepted, no effect)."),
    ("tokenizer_worker_num", 1, [], _INT, "Tokenizer workers (accepted, no effect)."),
    ("skip_tokenizer_init", False, [], _TRUE, "Accepted, no effect."),
    ("load_format", "auto", [], _STR, "Accepted, no effect."),
    ("model_loader_extra_config", "{}", [], _STR, "Accepted, no effect."),
    ("trust_remote_code", False, [], _TRUE, "Accepted, no effect."),
    ("context_length", None, [], _INT, "Context length; default: max_position_embeddings of the model."),
    ("is_embedding", False, [], _TRUE, "Accepted, no effect."),
    ("enable_multimodal", None, [], _TRUE, "Accepted, no effect."),
    ("revision", None, [], _STR, "Accepted, no effect."),
    ("model_impl", "auto", [], _STR, "Accepted, no effect."),
    ("host", "127.0.0.1", [], _STR, "HTTP bind address."),
    ("port", 30000, [], _INT, "HTTP port."),
    ("skip_server_warmup", False, [], _TRUE, "Skip the warm-up /generate; ready as soon as the port is up."),
    ("warmups", None, [], _STR, "Accepted, no effect."),
    ("nccl_port", None, [], _INT, "Accepted, no effect."),
    ("dtype", "auto", [], _STR, "Accepted; shown in the Load weight end line."),
    ("quantization", None, [], _STR, "Accepted, no effect."),
    ("kv_cache_dtype", "auto", [], _STR, "Accepted; shown in the KV cache dtype line."),
    ("mem_fraction_static", None, [], _FLOAT, "Fraction of GPU memory for weights + KV; default auto."),
    ("max_running_requests", None, [], _INT, "Max concurrently decoding requests; 48 when speculative."),
    ("max_queued_requests", None, [], _INT, "Accepted, no effect."),
    ("max_total_tokens", None, [], _INT, "Cap on the KV pool size in tokens."),
    ("chunked_prefill_size", None, [], _INT, "Default auto (by GPU memory)."),
    ("max_prefill_tokens", 16384, [], _INT, "Max tokens in one prefill batch."),
    ("schedule_policy", "fcfs", [], _STR, "Accepted, no effect."),
    ("schedule_conservativeness", 1.0, [], _FLOAT, "Accepted, no effect."),
    ("page_size", None, [], _INT, "Accepted, no effect."),
    ("device", None, [], _STR, "Accepted, no effect."),
    ("tp_size", 1, ["--tensor-parallel-size"], _INT, "Tensor parallel size: one scheduler process per rank."),
    ("pp_size", 1, ["--pipeline-parallel-size"], _INT, "Accepted, no effect."),
    ("stream_interval", 1, [], _INT, "Accepted, no effect."),
    ("stream_output", False, [], _TRUE, "Accepted, no effect."),
    ("random_seed", None, [], _INT, "Seed of the speed model noise and acceptance (unless SIMHOST_SEED)."),
    ("watchdog_timeout", 300.0, [], _FLOAT, "Accepted, no effect."),
    ("download_dir", None, [], _STR, "Accepted, no effect."),
    ("base_gpu_id", 0, [], _INT, "First GPU index used by rank 0."),
    ("gpu_id_step", 1, [], _INT, "GPU index step between ranks."),
    ("log_level", "info", [], _STR, "Accepted."),
    ("log_level_http", None, [], _STR, "Accepted."),
    ("log_requests", False, [], _TRUE, "Accepted, no effect."),
    ("log_requests_level", 2, [], _INT, "Accepted, no effect."),
    ("show_time_cost", False, [], _TRUE, "Accepted, no effect."),
    ("enable_metrics", False, [], _TRUE, "Serve Prometheus /metrics."),
    ("enable_metrics_for_all_schedulers", False, [], _TRUE, "Accepted, no effect."),
    ("decode_log_interval", 40, [], _INT, "One Decode batch log line every N decode iterations."),
    ("enable_request_time_stats_logging", False, [], _TRUE, "Accepted, no effect."),
    ("api_key", None, [], _STR, "Accepted, not enforced."),
    ("served_model_name", None, [], _STR, "Model id in /v1/models; defaults to the model path."),
    ("weight_version", "default", [], _STR, "Shown in /model_info and meta_info."),
    ("chat_template", None, [], _STR, "Accepted, no effect."),
    ("completion_template", None, [], _STR, "Accepted, no effect."),
    ("file_storage_path", "sglang_storage", [], _STR, "Accepted, no effect."),
    ("enable_cache_report", False, [], _TRUE, "Accepted, no effect."),
    ("reasoning_parser", None, [], _STR, "Accepted, no effect."),
    ("tool_call_parser", None, [], _STR, "Accepted, no effect."),
    ("dp_size", 1, ["--data-parallel-size"], _INT, "Accepted, no effect."),
    ("load_balance_method", "round_robin", [], _STR, "Accepted, no effect."),
    ("dist_init_addr", None, [], _STR, "Accepted, no effect."),
    ("nnodes", 1, [], _INT, "Accepted, no effect."),
    ("node_rank", 0, [], _INT, "Accepted, no effect."),
    ("json_model_override_args", "{}", [], _STR, "Accepted, no effect."),
    ("preferred_sampling_params", None, [], _STR, "Accepted, no effect."),
    ("speculative_algorithm", None, [], {"type": str, "choices": SPEC_ALGORITHMS}, "Speculative algorithm."),
    ("speculative_draft_model_path", None, ["--speculative-draft-model"], _STR, "Draft model directory."),
    ("speculative_draft_model_revision", None, [], _STR, "Accepted, no effect."),
    ("speculative_draft_load_format", None, [], _STR, "Accepted, no effect."),
    ("speculative_num_steps", None, [], _INT, "Draft steps per iteration; default auto."),
    ("speculative_eagle_topk", None, [], _INT, "Draft branching factor; default auto."),
    ("speculative_num_draft_tokens", None, [], _INT, "Tokens verified per iteration; default auto."),
    ("speculative_accept_threshold_single", 1.0, [], _FLOAT, "Accepted, no effect."),
    ("speculative_accept_threshold_acc", 1.0, [], _FLOAT, "Accepted, no effect."),
    ("speculative_token_map", None, [], _STR, "Accepted, no effect."),
    ("speculative_attention_mode", "prefill", [], _STR, "Accepted, no effect."),
    ("speculative_draft_attention_backend", None, [], _STR, "Accepted, no effect."),
    ("ep_size", 1, ["--expert-parallel-size"], _INT, "Accepted, no effect."),
    ("moe_runner_backend", "auto", [], _STR, "Accepted, no effect."),
    ("enable_dp_attention", False, [], _TRUE, "Accepted, no effect."),
    ("attention_backend", None, [], _STR, "Accepted, no effect."),
    ("sampling_backend", None, [], _STR, "Accepted, no effect."),
    ("grammar_backend", None, [], _STR, "Accepted, no effect."),
    ("disable_radix_cache", False, [], _TRUE, "Disable the prefix cache (#cached-token stays 0)."),
    ("cuda_graph_max_bs", None, [], _INT, "Largest captured batch size; default auto."),
    ("cuda_graph_bs", None, [], {"type": int, "nargs": "+"}, "Captured batch sizes; default auto."),
    ("disable_cuda_graph", False, [], _TRUE, "No CUDA graphs: slower decode steps."),
    ("disable_cuda_graph_padding", False, [], _TRUE, "Accepted, no effect."),
    ("enable_profile_cuda_graph", False, [], _TRUE, "Accepted, no effect."),
    ("enable_nccl_nvls", False, [], _TRUE, "Accepted, no effect."),
    ("disable_custom_all_reduce", False, [], _TRUE, "Accepted, no effect."),
    ("enable_mscclpp", False, [], _TRUE, "Accepted, no effect."),
    ("disable_overlap_schedule", False, [], _TRUE, "No overlap scheduler: +CPU overhead per step."),
    ("enable_mixed_chunk", False, [], _TRUE, "Accepted, no effect."),
    ("enable_torch_compile", False, [], _TRUE, "Accepted, no effect."),
    ("torch_compile_max_bs", 32, [], _INT, "Accepted, no effect."),
    ("allow_auto_truncate", False, [], _TRUE, "Accepted, no effect."),
    ("enable_p2p_check", False, [], _TRUE, "Accepted, no effect."),
    ("enable_memory_saver", False, [], _TRUE, "Accepted, no effect."),
    ("tool_server", None, [], _STR, "Accepted, no effect."),
]

ServerArgs = dataclasses.make_dataclass(
    "ServerArgs", [(name, object, dataclasses.field(default=default)) for name, default, _, _, _ in _FIELDS]
)


class SimhostError(Exception):
    """A startup problem the real server reports as an exception from the main process."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="launch_server.py",
        description="Simulated sglang.launch_server (SGLang 0.5.9 interface, no GPU needed).",
        epilog=knobs.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name, default, aliases, kwargs, help_text in _FIELDS:
        flag = "--" + name.replace("_", "-")
        extra = {} if kwargs.get("required") else {"default": default}
        parser.add_argument(flag, *aliases, dest=name, help=help_text, **extra, **kwargs)
    return parser


def read_model_config(path: str) -> dict[str, Any]:
    config = Path(path) / "config.json"
    if not config.is_file():
        # The message transformers raises when a local path is not a model directory.
        raise OSError(
            f"Can't load the configuration of '{path}'. If you were trying to load it from "
            "'https://huggingface.co/models', make sure you don't have a local directory with the same name. "
            f"Otherwise, make sure '{path}' is the correct path to a directory containing a config.json file"
        )
    data: dict[str, Any] = json.loads(config.read_text())
    return data


def _auto_spec_params(architectures: list[str], algorithm: str) -> tuple[int, int, int]:
    arch = architectures[0] if architectures else ""
    if algorithm == "STANDALONE":
        return 3, 1, 4
    if arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
        return 5, 4, 8
    # DeepSeek, GptOss, Glm4Moe, ... and since 0.5.8 every other architecture.
    return 3, 1, 4


def _gpu_memory_defaults(gpu_mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory, 0.5.9 `_handle_gpu_memory_settings`."""
    gib = gpu_mib / 1024
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 2048, 24 if tp < 4 else 80
    if gib < 60:
        return 4096, 32 if tp < 4 else 160
    if gib < 160:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def resolve(argv: list[str], env: dict[str, str]) -> tuple[Any, list[str]]:
    """Parse argv and apply SGLang's post-init rules. Returns (ServerArgs, warnings printed before logging)."""
    ns = build_parser().parse_args(argv)
    args = ServerArgs(**vars(ns))
    warnings: list[str] = []
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    gpu_mib = knobs.gpu_memory_mib(env)
    chunked, graph_bs = _gpu_memory_defaults(gpu_mib, args.tp_size)
    if args.chunked_prefill_size is None:
        args.chunked_prefill_size = chunked
    if args.cuda_graph_max_bs is None:
        args.cuda_graph_max_bs = graph_bs
    if args.page_size is None:
        args.page_size = 1

    if args.speculative_algorithm == "NEXTN":
        args.speculative_algorithm = "EAGLE"
    algo = args.speculative_algorithm
    if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        if args.max_running_requests is None:
            args.max_running_requests = 48
            warnings.append(
                "Max running requests is reset to 48 for speculative decoding. You can override this by "
                "explicitly setting --max-running-requests."
            )
        spec_v2 = env.get("SGLANG_ENABLE_SPEC_V2", "").lower() in ("1", "true", "yes", "on")
        if spec_v2 and algo in ("EAGLE", "EAGLE3"):
            warnings.append(
                "Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on."
            )
        else:
            args.disable_overlap_schedule = True
            warnings.append(
                "Overlap scheduler is disabled when spec v2 is off or using unsupported speculative "
                "algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap "
                "scheduler. "
            )
        args.enable_mixed_chunk = False
        if args.speculative_num_steps is None:
            if args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None:
                raise AssertionError(
                    "speculative_eagle_topk and speculative_num_draft_tokens must be None when "
                    "speculative_num_steps is None"
                )
            target = read_model_config(args.model_path)
            steps, topk, draft = _auto_spec_params(target.get("architectures", []), algo)
            args.speculative_num_steps = steps
            args.speculative_eagle_topk = topk
            args.speculative_num_draft_tokens = draft
        if args.speculative_eagle_topk is None:
            args.speculative_eagle_topk = 1
        if args.speculative_num_draft_tokens is None:
            args.speculative_num_draft_tokens = args.speculative_num_steps + 1
        if args.speculative_eagle_topk == 1 and args.speculative_num_draft_tokens != args.speculative_num_steps + 1:
            warnings.append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            )
            args.speculative_num_draft_tokens = args.speculative_num_steps + 1
        if spec_v2 and algo in ("EAGLE", "EAGLE3") and args.speculative_eagle_topk > 1:
            raise ValueError("Spec v2 currently only supports topk = 1 for speculative decoding.")
    elif algo == "NGRAM":
        args.disable_overlap_schedule = True
        if args.speculative_num_draft_tokens is None:
            args.speculative_num_draft_tokens = 12
        if args.speculative_num_steps is None:
            args.speculative_num_steps = args.speculative_num_draft_tokens - 1
        if args.speculative_eagle_topk is None:
            args.speculative_eagle_topk = 1

    if args.mem_fraction_static is None:
        reserved = 512 + max(args.chunked_prefill_size, 2048) * 1.5 + args.cuda_graph_max_bs * 2
        reserved += args.tp_size * args.pp_size / 8 * 1024
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if algo == "STANDALONE":
            reserved += 6 * 1024
        elif algo in ("EAGLE", "EAGLE3"):
            reserved += 2 * 1024
        args.mem_fraction_static = round((gpu_mib - reserved) / gpu_mib, 3)
    return args, warnings


def is_speculative(args: Any) -> bool:
    return args.speculative_algorithm is not None


def env_flag(env: dict[str, str] | os._Environ[str], name: str) -> bool:
    return env.get(name, "").lower() in ("1", "true", "yes", "on")
