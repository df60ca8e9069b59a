"""Command line of `python -m simhost.launch_server`: SGLang 0.5.9 flag names, defaults and resolution rules.

One table drives both the argparse parser and the `ServerArgs` dataclass, so `/server_info` and the
`server_args=ServerArgs(...)` log line always show exactly what the parser accepted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import Any

from simhost import adaptive, knobs, versions

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

# Era C (0.5.14+, `arg_groups`) replaces the CUDA-graph flags: these leave the dataclass, _ERA_C_FIELDS join it.
_NOT_IN_ERA_C = {"cuda_graph_max_bs", "cuda_graph_bs", "disable_cuda_graph"}
_ERA_C_FIELDS: list[tuple[str, Any, list[str], dict[str, Any], str]] = [
    ("cuda_graph_max_bs_decode", None, [], _INT, "Largest captured decode batch size; default auto."),
    ("cuda_graph_max_bs_prefill", None, [], _INT, "Accepted, no effect."),
    ("cuda_graph_bs_decode", None, [], {"type": int, "nargs": "+"}, "Captured decode batch sizes; default auto."),
    (
        "cuda_graph_backend_decode",
        "full",
        [],
        {"type": str, "choices": ["full", "breakable", "disabled"]},
        "disabled: no decode CUDA graphs (slower steps).",
    ),
    (
        "cuda_graph_backend_prefill",
        "full",
        [],
        {"type": str, "choices": ["full", "breakable", "disabled"]},
        "Accepted, no effect.",
    ),
    ("disable_decode_cuda_graph", False, [], _TRUE, "No decode CUDA graphs (slower steps)."),
    ("disable_prefill_cuda_graph", False, [], _TRUE, "Accepted, no effect."),
    (
        "speculative_adaptive",
        False,
        [],
        _TRUE,
        "Move the speculative steps with the batch size (EAGLE/EAGLE3, topk 1; simhost/adaptive.py).",
    ),
    ("speculative_adaptive_config", None, [], _STR, "JSON file of the adaptive schedule; default SGLang's."),
    ("enable_multi_layer_eagle", False, [], _TRUE, "Accepted; rules out --speculative-adaptive."),
    ("enable_two_batch_overlap", False, [], _TRUE, "Accepted; rules out --speculative-adaptive."),
    ("enable_pdmux", False, [], _TRUE, "Accepted; rules out --speculative-adaptive."),
]
# 0.5.3 only: the beta spec flag that SGLANG_ENABLE_SPEC_V2 replaced in 0.5.4.
_BETA_SPEC_FIELD: tuple[str, Any, list[str], dict[str, Any], str] = (
    "enable_beta_spec",
    False,
    [],
    _TRUE,
    "0.5.3: overlap scheduler for EAGLE (beta spec).",
)
ERA_C_ALGORITHMS = [*SPEC_ALGORITHMS, "DFLASH", "DSPARK", "UNO"]
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")
# The algorithms simhost runs (UNO is a builtin name of era C it does not simulate).
SIMULATED_ALGORITHMS = (*SPEC_ALGORITHMS, "DFLASH", "DSPARK")
# Targets whose checkpoint carries MTP heads: SGLang points the draft at the target itself (`_handle_eagle_family`).
MTP_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM", "BailingMoeV2ForCausalLM")

# NGRAM's flags, in ServerArgs order after --speculative-draft-attention-backend (0.5.9's and 0.5.20's dumps):
# classic eras (0.5.3 - 0.5.12) match windows and a branch length; era C a trie depth and an external corpus, no
# match windows (0.5.20 measured: "window-size flags do not exist"). From era C's first release on: a guess.
_NGRAM_CLASSIC: list[tuple[str, Any, list[str], dict[str, Any], str]] = [
    ("speculative_ngram_min_match_window_size", 1, [], _INT, "NGRAM: shortest suffix matched."),
    ("speculative_ngram_max_match_window_size", 12, [], _INT, "NGRAM: longest suffix matched."),
    ("speculative_ngram_min_bfs_breadth", 1, [], _INT, "NGRAM: narrowest trie breadth."),
    ("speculative_ngram_max_bfs_breadth", 10, [], _INT, "NGRAM: widest trie breadth (becomes the topk)."),
    ("speculative_ngram_match_type", "BFS", [], {"type": str, "choices": ["BFS", "PROB"]}, "NGRAM: match type."),
    ("speculative_ngram_branch_length", 18, [], _INT, "NGRAM: branch length."),
    ("speculative_ngram_capacity", 10_000_000, [], _INT, "NGRAM: trie capacity."),
]
_NGRAM_ERA_C: list[tuple[str, Any, list[str], dict[str, Any], str]] = [
    ("speculative_ngram_min_bfs_breadth", 1, [], _INT, "NGRAM: narrowest trie breadth."),
    ("speculative_ngram_max_bfs_breadth", 10, [], _INT, "NGRAM: widest trie breadth (becomes the topk)."),
    ("speculative_ngram_match_type", "BFS", [], {"type": str, "choices": ["BFS", "PROB"]}, "NGRAM: match type."),
    ("speculative_ngram_max_trie_depth", 18, [], _INT, "NGRAM: trie depth."),
    ("speculative_ngram_capacity", 10_000_000, [], _INT, "NGRAM: trie capacity."),
    ("speculative_ngram_external_corpus_path", None, [], _STR, "NGRAM: an external corpus (accepted)."),
    ("speculative_ngram_external_sam_budget", 0, [], _INT, "NGRAM: drafts from the external corpus."),
    ("speculative_ngram_external_corpus_max_tokens", 10_000_000, [], _INT, "NGRAM: external corpus size."),
]
# Era C's block drafters (0.5.23 `arg_groups/speculative_hook.py`): DFLASH's block size and the draft's window
# after the draft tokens, DSpark's block size and confidence threshold (default 0.5: a guess from a DSpark port's
# CLI, SGLang's own default not read).
_BLOCK_FLAGS_AFTER_DRAFT_TOKENS: list[tuple[str, Any, list[str], dict[str, Any], str]] = [
    ("speculative_dflash_block_size", None, [], _INT, "DFLASH: block size (= draft tokens); default the draft's."),
]
_BLOCK_FLAGS_AFTER_ATTENTION: list[tuple[str, Any, list[str], dict[str, Any], str]] = [
    ("speculative_draft_window_size", None, [], _INT, "DFLASH / EAGLE-3: draft KV window (accepted)."),
    ("speculative_dspark_block_size", None, [], _INT, "DSPARK: block size (= draft tokens); default the draft's."),
    (
        "speculative_dspark_confidence_threshold",
        0.5,
        [],
        _FLOAT,
        "DSPARK: confidence needed to verify a draft, [0, 1]; 0 verifies whole blocks.",
    ),
]


def _fields(ver: versions.Version) -> list[tuple[str, Any, list[str], dict[str, Any], str]]:
    out = []
    for entry in _FIELDS:
        name = entry[0]
        if ver.arg_groups and name in _NOT_IN_ERA_C:
            continue
        if ver.arg_groups and name == "speculative_algorithm":
            entry = (name, None, [], {"type": str.upper}, "Speculative algorithm: " + ", ".join(ERA_C_ALGORITHMS))
        out.append(entry)
        if name == "disable_radix_cache" and ver.arg_groups:
            out += _ERA_C_FIELDS
        if name == "speculative_num_draft_tokens" and ver.arg_groups:
            out += _BLOCK_FLAGS_AFTER_DRAFT_TOKENS
        if name == "speculative_draft_attention_backend":
            out += _BLOCK_FLAGS_AFTER_ATTENTION + _NGRAM_ERA_C if ver.arg_groups else _NGRAM_CLASSIC
        if name == "disable_overlap_schedule" and ver.beta_spec_flag:
            out.append(_BETA_SPEC_FIELD)
    return out


@functools.cache
def server_args_class(ver: versions.Version) -> type:
    """The `ServerArgs` dataclass of that version (its repr is the `server_args=ServerArgs(...)` log line)."""
    return dataclasses.make_dataclass(
        "ServerArgs", [(name, object, dataclasses.field(default=default)) for name, default, *_ in _fields(ver)]
    )


class SimhostError(Exception):
    """A startup problem the real server reports as an exception from the main process."""


def _deprecated(new_flag: str, dest: str, value: Any = None, store_true: bool = False) -> type[argparse.Action]:
    """Era C's DeprecatedAliasStoreAction / DeprecatedStoreTrueAction: warn, then set the new field."""

    class Deprecated(argparse.Action):
        def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
            kwargs["nargs"] = 0 if store_true else None
            kwargs.pop("default", None)
            super().__init__(option_strings, argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs)

        def __call__(self, parser: Any, ns: Any, values: Any, option_string: str | None = None) -> None:
            setattr(ns, dest_name, value if store_true else values)
            getattr(ns, "_deprecations", []).append(
                f"\033[1;33m'{option_string}' is deprecated and will be removed in a future release. "
                f"Use '{new_flag}' instead.\033[0m"
            )

    dest_name = dest
    return Deprecated


def build_parser(ver: versions.Version | None = None) -> argparse.ArgumentParser:
    ver = ver or versions.current()
    parser = argparse.ArgumentParser(
        prog="launch_server.py",
        description=(
            f"Simulated sglang.launch_server (SGLang {ver.text} interface, era {ver.era}; no GPU needed). "
            f"Set SIMHOST_SGLANG_VERSION to imitate another version ({', '.join(versions.SUPPORTED)})."
        ),
        epilog=knobs.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name, default, aliases, kwargs, help_text in _fields(ver):
        flag = "--" + name.replace("_", "-")
        extra = {} if kwargs.get("required") else {"default": default}
        parser.add_argument(flag, *aliases, dest=name, help=help_text, **extra, **kwargs)
    if ver.arg_groups:
        parser.add_argument(
            "--disable-cuda-graph",
            action=_deprecated("--cuda-graph-backend-decode=disabled", "cuda_graph_backend_decode", "disabled", True),
            help="Deprecated: use --cuda-graph-backend-decode=disabled.",
        )
        if ver.cuda_graph_max_bs_flag == "deprecated":
            parser.add_argument(
                "--cuda-graph-max-bs",
                type=int,
                action=_deprecated("--cuda-graph-max-bs-decode", "cuda_graph_max_bs_decode"),
                help="Deprecated alias of --cuda-graph-max-bs-decode (removed in 0.5.20).",
            )
    return parser


def _get(a: Any, name: str) -> Any:
    return a.get(name) if isinstance(a, dict) else getattr(a, name, None)


def cuda_graph_disabled(a: Any) -> bool:
    """--disable-cuda-graph (<= 0.5.12) or --cuda-graph-backend-decode=disabled / --disable-decode-cuda-graph."""
    return bool(
        _get(a, "disable_cuda_graph")
        or _get(a, "disable_decode_cuda_graph")
        or _get(a, "cuda_graph_backend_decode") == "disabled"
    )


def cuda_graph_max_bs(a: Any) -> int | None:
    value = _get(a, "cuda_graph_max_bs") or _get(a, "cuda_graph_max_bs_decode")
    return int(value) if value else None


def cuda_graph_bs(a: Any) -> list[int] | None:
    value = _get(a, "cuda_graph_bs") or _get(a, "cuda_graph_bs_decode")
    return list(value) if value else None


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


_TOPK1_ARCHS = ("Deepseek", "GptOss", "Glm4Moe", "Bailing", "Kimi")


def _auto_spec_params(architectures: list[str], algorithm: str, ver: versions.Version) -> tuple[int, int, int]:
    arch = architectures[0] if architectures else ""
    if algorithm == "STANDALONE":
        return 3, 1, 4
    if arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
        return 5, 4, 8
    if arch.startswith(_TOPK1_ARCHS) or ver.at_least("0.5.8"):
        return 3, 1, 4
    return 5, 4, 8  # every other architecture before 0.5.8


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


def _truthy(value: str) -> bool:
    return value.lower() in ("1", "true", "yes", "on")


def resolve(argv: list[str], env: dict[str, str]) -> tuple[Any, list[str]]:
    """Parse argv and apply SGLang's post-init rules for the SIMHOST_SGLANG_VERSION in env.

    Returns (ServerArgs, warnings): printed bare before 0.5.12 (logging is not configured yet), with a
    timestamp from 0.5.12 on.
    """
    ver = versions.current(env)
    deprecations: list[str] = []  # era C's deprecated flags log while argparse runs
    ns = build_parser(ver).parse_args(argv, namespace=argparse.Namespace(_deprecations=deprecations))
    values = vars(ns)
    values.pop("_deprecations", None)
    args = server_args_class(ver)(**values)
    warnings: list[str] = []
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    gpu_mib = knobs.gpu_memory_mib(env)
    chunked, graph_bs = _gpu_memory_defaults(gpu_mib, args.tp_size)
    if args.chunked_prefill_size is None:
        args.chunked_prefill_size = chunked
    graph_field = "cuda_graph_max_bs_decode" if ver.arg_groups else "cuda_graph_max_bs"
    if getattr(args, graph_field) is None:
        setattr(args, graph_field, graph_bs)
    if args.page_size is None:
        args.page_size = 1

    if args.speculative_algorithm == "NEXTN":
        args.speculative_algorithm = "EAGLE"
    algo = args.speculative_algorithm
    known = SIMULATED_ALGORITHMS if ver.arg_groups else SPEC_ALGORITHMS
    if algo is not None and algo not in known:
        raise ValueError(f"simhost does not simulate speculative algorithm {algo!r}; use one of {list(known)}")
    if algo in EAGLE_FAMILY and not args.speculative_draft_model_path and arch_of(args.model_path) in MTP_ARCHITECTURES:
        args.speculative_draft_model_path = args.model_path  # the MTP heads live in the target's own checkpoint
    window = getattr(args, "speculative_draft_window_size", None)
    if window is not None and algo not in ("EAGLE3", "DFLASH"):
        if int(window) <= 0:
            raise ValueError(f"--speculative-draft-window-size must be positive, got {window}.")
        warnings.append(
            f"--speculative-draft-window-size has no effect with speculative_algorithm={algo} (honored by Llama "
            "EAGLE-3 and DFLASH only)."
        )
    if getattr(args, "speculative_adaptive", False):
        warnings += _adaptive_rules(args)
    if algo in EAGLE_FAMILY:
        if args.max_running_requests is None:
            args.max_running_requests = 48
            if ver.warns_max_running_reset:
                warnings.append(
                    "Max running requests is reset to 48 for speculative decoding. You can override this by "
                    "explicitly setting --max-running-requests."
                )
        if args.speculative_num_steps is None:
            if args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None:
                raise AssertionError(
                    "speculative_eagle_topk and speculative_num_draft_tokens must be None when "
                    "speculative_num_steps is None"
                )
            target = read_model_config(args.model_path)
            steps, topk, draft = _auto_spec_params(target.get("architectures", []), algo, ver)
            args.speculative_num_steps = steps
            args.speculative_eagle_topk = topk
            args.speculative_num_draft_tokens = draft
        if args.speculative_eagle_topk is None:
            args.speculative_eagle_topk = 1
        if args.speculative_num_draft_tokens is None:
            args.speculative_num_draft_tokens = args.speculative_num_steps + 1
        warnings += _overlap_rules(args, algo, env, ver)
        if args.enable_mixed_chunk:
            args.enable_mixed_chunk = False
            warnings.append(
                f"Mixed chunked prefill is disabled: {algo} speculative decoding does not support it."
                if ver.arg_groups
                else "Mixed chunked prefill is disabled because of using eagle speculative decoding."
            )
        if args.speculative_eagle_topk == 1 and args.speculative_num_draft_tokens != args.speculative_num_steps + 1:
            warnings.append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            )
            args.speculative_num_draft_tokens = args.speculative_num_steps + 1
    elif algo == "NGRAM":
        warnings += _ngram_rules(args, ver)
    elif algo == "DFLASH":
        warnings += _dflash_rules(args, ver)
    elif algo == "DSPARK":
        warnings += _dspark_rules(args, ver)

    if args.mem_fraction_static is None:
        max_bs = cuda_graph_max_bs(args) or 0
        reserved = 512 + max(args.chunked_prefill_size, 2048) * 1.5 + max_bs * 2
        reserved += args.tp_size * args.pp_size / 8 * 1024
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if algo == "STANDALONE":
            reserved += 6 * 1024
        elif algo in ("EAGLE", "EAGLE3"):
            reserved += 2 * 1024
        args.mem_fraction_static = round((gpu_mib - reserved) / gpu_mib, 3)
    return args, deprecations + warnings


def arch_of(model_path: str) -> str:
    try:
        return str((read_model_config(model_path).get("architectures") or [""])[0])
    except OSError:
        return ""


def _max_running_48(args: Any, ver: versions.Version) -> list[str]:
    if args.max_running_requests is not None:
        return []
    args.max_running_requests = 48
    if not ver.warns_max_running_reset:
        return []
    return [
        "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting "
        "--max-running-requests."
    ]


def _ngram_rules(args: Any, ver: versions.Version) -> list[str]:
    """SGLang's `_handle_ngram`: CUDA only, topk from the widest trie breadth, 12 draft tokens by default, mixed
    chunk off (and the overlap scheduler, before era C)."""
    if args.device not in (None, "cuda") and not str(args.device).startswith("cuda"):
        raise ValueError("Ngram speculative decoding only supports CUDA device.")
    out = _max_running_48(args, ver)
    args.enable_mixed_chunk = False
    args.speculative_eagle_topk = args.speculative_ngram_max_bfs_breadth
    if args.speculative_num_draft_tokens is None:
        args.speculative_num_draft_tokens = 12
        if ver.arg_groups:
            out.append(
                "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. You can "
                "override this by explicitly setting --speculative-num-draft-tokens."
            )
    if args.speculative_num_steps is None:
        if ver.arg_groups:
            args.speculative_num_steps = max(1, args.speculative_num_draft_tokens // args.speculative_eagle_topk)
        else:  # what simhost always did for the classic eras (SGLang's own rule there not read)
            args.speculative_num_steps = args.speculative_num_draft_tokens - 1
    if ver.arg_groups:
        external = args.speculative_ngram_external_corpus_path is not None
        if external and args.speculative_ngram_external_sam_budget <= 0:
            raise ValueError(
                "--speculative-ngram-external-sam-budget must be positive when "
                "--speculative-ngram-external-corpus-path is set."
            )
        if external and args.speculative_ngram_external_sam_budget > args.speculative_num_draft_tokens - 1:
            raise ValueError(
                "speculative_ngram_external_sam_budget must be less than or equal to "
                f"speculative_num_draft_tokens - 1 ({args.speculative_num_draft_tokens - 1})."
            )
        out.append("The mixed chunked prefill are disabled because of using ngram speculative decoding.")
    else:
        args.disable_overlap_schedule = True
        out.append("The overlap scheduler and mixed chunked prefill are disabled because of using ngram speculative "
                   "decoding.")  # fmt: skip
    topk, page = args.speculative_eagle_topk, args.page_size or 1
    if topk > 1 and page > 1 and args.attention_backend != "flashinfer":
        raise ValueError(
            f"speculative_eagle_topk({topk}) > 1 with page_size({page}) > 1 is unstable and produces incorrect "
            "results for paged attention backends. This combination is only supported for the 'flashinfer' backend."
        )
    if args.enable_dp_attention:
        raise ValueError("Currently ngram speculative decoding does not support dp attention.")
    return out


def _block_rules(args: Any, name: str, block_flag: str, default_block: int, config_key: str) -> list[str]:
    """What `_handle_dflash` and `_handle_dspark` share: one step and topk 1 forced with a warning, the block size
    flag equal to the draft tokens, the draft tokens defaulting to the draft's config, else `default_block`."""
    out = []
    for field in ("speculative_num_steps", "speculative_eagle_topk"):
        value = getattr(args, field)
        if value is not None and int(value) != 1:
            out.append(f"{name} only supports {field} == 1; overriding {field}={value} to 1.")
        setattr(args, field, 1)
    block = getattr(args, block_flag)
    flag = "--" + block_flag.replace("_", "-")
    if block is not None:
        if int(block) <= 0:
            raise ValueError(f"{name} requires {flag} to be positive, got {block}.")
        drafts = args.speculative_num_draft_tokens
        if drafts is not None and int(drafts) != int(block):
            raise ValueError(
                f"Both --speculative-num-draft-tokens and {flag} are set but they differ. For {name} they must "
                f"match. speculative_num_draft_tokens={drafts}, {block_flag}={block}."
            )
        args.speculative_num_draft_tokens = int(block)
    if args.speculative_num_draft_tokens is None:
        inferred = None
        path = args.speculative_draft_model_path
        if path:
            with contextlib.suppress(OSError):
                inferred = read_model_config(path).get(config_key)
        if not inferred:
            inferred = default_block
            out.append(f"speculative_num_draft_tokens is not set; defaulting to {inferred} for {name}.")
        args.speculative_num_draft_tokens = int(inferred)
    return out


def _dflash_rules(args: Any, ver: versions.Version) -> list[str]:
    """SGLang's `_handle_dflash` (era C)."""
    if args.enable_dp_attention:
        raise ValueError("Currently DFLASH speculative decoding does not support dp attention.")
    if args.pp_size != 1:
        raise ValueError("Currently DFLASH speculative decoding only supports pp_size == 1.")
    if args.speculative_draft_model_path is None:
        raise ValueError("DFLASH speculative decoding requires setting --speculative-draft-model-path.")
    out = _block_rules(args, "DFLASH", "speculative_dflash_block_size", 16, "block_size")
    window = args.speculative_draft_window_size
    if window is not None:
        if int(window) <= 0:
            raise ValueError(f"--speculative-draft-window-size must be positive, got {window}.")
        if int(window) < args.speculative_num_draft_tokens:
            raise ValueError(
                "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). "
                f"window_size={window}, block_size={args.speculative_num_draft_tokens}."
            )
    out += _max_running_48(args, ver)
    if args.enable_mixed_chunk:
        args.enable_mixed_chunk = False
        out.append("Mixed chunked prefill is disabled because of using dflash speculative decoding.")
    return out


def _dspark_rules(args: Any, ver: versions.Version) -> list[str]:
    """SGLang's `_handle_dspark` (era C): the draft defaults to the target's own checkpoint."""
    if args.pp_size != 1:
        raise ValueError("Currently DSpark speculative decoding only supports pp_size == 1.")
    if args.speculative_draft_model_path is None:
        args.speculative_draft_model_path = args.model_path
    out = _block_rules(args, "DSpark", "speculative_dspark_block_size", 5, "dspark_block_size")
    threshold = float(args.speculative_dspark_confidence_threshold)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"--speculative-dspark-confidence-threshold must be in [0, 1], got {threshold}.")
    out += _max_running_48(args, ver)
    if args.enable_mixed_chunk:
        args.enable_mixed_chunk = False
        out.append("Mixed chunked prefill is disabled because of using DSpark speculative decoding.")
    return out


def _adaptive_rules(args: Any) -> list[str]:
    """SGLang's `_maybe_disable_adaptive` then `_init_adaptive_speculative_params`: an unsupported combination
    falls back to static speculation with a warning; otherwise topk defaults to 1, the steps to the middle
    candidate, given steps must be a candidate, and the draft tokens follow the steps. The config file is read
    here, as SGLang reads it while resolving the server args (a bad one is a ValueError from the main process)."""
    reason = adaptive.unsupported_reason(args)
    if reason is not None:
        args.speculative_adaptive = False
        return [f"speculative_adaptive disabled: {reason}. Falling back to static speculative params."]
    text = None
    if args.speculative_adaptive_config is not None:
        text = Path(args.speculative_adaptive_config).read_text()
    candidates = adaptive.candidate_steps(adaptive.parse_config(text))
    if args.speculative_eagle_topk is None:
        args.speculative_eagle_topk = 1
    if args.speculative_num_steps is None:
        args.speculative_num_steps = candidates[len(candidates) // 2]
    if args.speculative_num_steps not in candidates:
        raise ValueError(
            f"--speculative-num-steps={args.speculative_num_steps} is not in the adaptive config candidate_steps "
            f"{candidates}. Pass one of those values."
        )
    args.speculative_num_draft_tokens = args.speculative_num_steps + 1
    return []


def _overlap_rules(args: Any, algo: str, env: dict[str, str], ver: versions.Version) -> list[str]:
    """Overlap scheduler / "spec v2" decision and its message, per version (reference §1.3 step 2)."""
    topk = args.speculative_eagle_topk
    if ver.beta_spec_flag:  # 0.5.3
        if algo == "EAGLE" and args.enable_beta_spec:
            return ["Beta spec is enabled for eagle speculative decoding and overlap schedule is turned on."]
        args.disable_overlap_schedule = True
        return ["Overlap scheduler is disabled because of using eagle3 and standalone speculative decoding."]
    raw = env.get("SGLANG_ENABLE_SPEC_V2")
    if not ver.at_least("0.5.7"):  # 0.5.4 - 0.5.6
        on = _truthy(raw or "")
        if on and algo == "EAGLE":
            return ["Beta spec is enabled for eagle speculative decoding and overlap schedule is turned on."]
        if on and algo == "EAGLE3":
            return []
        args.disable_overlap_schedule = True
        return ["Overlap scheduler is disabled because of using eagle3 or standalone speculative decoding."]
    if not ver.at_least("0.5.12"):  # 0.5.7 - 0.5.10, default off
        if _truthy(raw or "") and algo in ("EAGLE", "EAGLE3"):
            if topk > 1:
                raise ValueError("Spec v2 currently only supports topk = 1 for speculative decoding.")
            return ["Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on."]
        args.disable_overlap_schedule = True
        return [
            "Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm. You "
            "can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler. "
        ]
    if not ver.arg_groups:  # 0.5.12, default on
        reason = None
        if raw is not None and not _truthy(raw):
            reason = "SGLANG_ENABLE_SPEC_V2=False"
        elif topk > 1:
            reason = "spec v2 currently only supports topk = 1"
        elif args.disable_overlap_schedule:
            reason = "overlap schedule is disabled"
        if reason is None:
            return ["Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding."]
        args.disable_overlap_schedule = True
        return [f"Spec v1 is used for eagle/eagle3/standalone speculative decoding because {reason}."]
    out = []  # era C: always the v2 worker
    if raw is not None and not ver.at_least("0.5.22"):
        out.append(
            "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker. Use "
            "--disable-overlap-schedule to select the non-overlap (synchronous) path."
        )
    if args.disable_overlap_schedule:
        out.append("Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding.")
    return out


def is_speculative(args: Any) -> bool:
    return args.speculative_algorithm is not None


def env_flag(env: dict[str, str] | os._Environ[str], name: str) -> bool:
    return env.get(name, "").lower() in ("1", "true", "yes", "on")
