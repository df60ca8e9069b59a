"""`vllm serve MODEL [flags]`: the flags per version, `--speculative-config` and its validation, the model configs,
and the errors vLLM raises for them in the API-server process before any engine exists (reference §1, §4.1, §4.3).

Pure apart from reading the models' config.json. A parse failure raises UsageError (argparse, exit 2); a config
failure raises ConfigError, whose text is the exception line(s) ending the traceback the API server prints (exit 1).
Over 400 lines because it holds vLLM's whole config-time surface (the flags of ten versions and every
SpeculativeConfig check), which reads best in one place.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simhost import drafts
from simhost.vllm.versions import VllmVersion

# The top-level parser's usage (the subcommand list varies by version and is unverified: reference §1.4).
TOP_USAGE = "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n"
# `vllm serve`'s own usage line (a guess: argparse's, shortened the way vLLM's help shortens it).
SERVE_USAGE = "usage: vllm serve [model_tag] [options]\n"
GIB = 1 << 30


class UsageError(Exception):
    """argparse's error: usage + `prog: error: message` on stderr, exit status 2."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class ConfigError(Exception):
    """What vLLM raises at config time: `text` is the exception line(s) (`ValueError: ...`, a pydantic block)."""

    def __init__(self, text: str, where: str = "vllm/engine/arg_utils.py") -> None:
        super().__init__(text)
        self.text = text
        self.where = where


def pydantic_value_error(cls: str, message: str, kwargs: dict[str, Any]) -> str:
    """A validator's ValueError as pydantic wraps it (real logs, reference §4.1)."""
    return (
        f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {cls}\n"
        f"  Value error, {message} [type=value_error, input_value=ArgsKwargs((), {kwargs!r}), "
        "input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.11/v/value_error"
    )


# -- flags ------------------------------------------------------------------------------------------------------


def _bool_or_none(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(name, action=argparse.BooleanOptionalAction, default=None)


def build_parser(ver: VllmVersion) -> argparse.ArgumentParser:
    """The `vllm serve` flags simhost knows (0.11.0 names and defaults, reference §1.4, adjusted per version);
    most are accepted without effect."""
    p = argparse.ArgumentParser(
        prog="vllm serve", usage="vllm serve [model_tag] [options]", add_help=False, allow_abbrev=False
    )
    p.add_argument("model_tag", nargs="?", default=None)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--model", default=None)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--revision", default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-model-len", type=_max_model_len, default=None)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--distributed-executor-backend", default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    _bool_or_none(p, "--enable-prefix-caching")
    _bool_or_none(p, "--enable-chunked-prefill")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--quantization", "-q", default=None)
    p.add_argument("--load-format", default="auto")
    p.add_argument("--generation-config", default="auto")
    p.add_argument("--reasoning-parser", default=None)
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--enable-auto-tool-choice", action="store_true")
    p.add_argument("--chat-template", default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None)
    p.add_argument("--uvicorn-log-level", default="info")
    p.add_argument("--disable-uvicorn-access-log", action="store_true")
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--disable-fastapi-docs", action="store_true")
    p.add_argument("--enable-server-load-tracking", action="store_true")
    p.add_argument("--api-server-count", *(["-asc"] if ver.at_least("0.13.0") else []), type=int, default=1)
    p.add_argument("--speculative-config", *(["-sc"] if ver.spec_shorthands else []), type=json.loads, default=None)
    if ver.disable_log_requests != "gone":
        p.add_argument("--disable-log-requests", action="store_true")
    if ver.at_least("0.10.0"):
        p.add_argument("--enable-log-requests", action="store_true")
        p.add_argument("--async-scheduling", action="store_true")
    if ver.compile_alias == "compilation-config":
        p.add_argument("--compilation-config", "-O", default=None)
        p.add_argument("--cuda-graph-sizes", nargs="+", type=int, default=None)
    else:
        p.add_argument("--compilation-config", *(["-cc"] if ver.compile_alias else []), default=None)
    if ver.compile_alias == "optimization-level":
        p.add_argument("--optimization-level", type=int, default=2)
        p.add_argument("--max-cudagraph-capture-size", type=int, default=None)
        p.add_argument("--cudagraph-capture-sizes", nargs="+", type=int, default=None)
    if ver.spec_shorthands:
        p.add_argument("--spec-method", default=None)
        p.add_argument("--spec-model", default=None)
        p.add_argument("--spec-tokens", type=int, default=None)
    if ver.per_request_spec_metrics:
        p.add_argument("--per-request-spec-decode-metrics", choices=["none", "summary", "detailed"], default="none")
    return p


def _max_model_len(text: str) -> int:
    """`--max-model-len` takes `1k`/`1K`-style suffixes (k = 1000, K = 1024) as vLLM's human_readable_int does."""
    units = {"k": 1000, "m": 1000**2, "g": 1000**3, "K": 1024, "M": 1024**2, "G": 1024**3}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def normalise_argv(argv: list[str], ver: VllmVersion) -> list[str]:
    """vLLM's FlexibleArgumentParser rewrites: `_` → `-` in a flag name (up to a `.` or `=`), `-O3` → `-O 3`, and
    (0.9.2+) the dotted `--speculative-config.KEY VALUE` form into one JSON `--speculative-config`."""
    out: list[str] = []
    dotted: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg.partition("=")
            head, dot, tail = name.partition(".")
            name = head.replace("_", "-") + dot + tail
            arg = name + eq + value
            if name.startswith("--speculative-config.") and ver.at_least("0.9.2"):
                key = name.split(".", 1)[1].replace("-", "_")
                if not eq:
                    i += 1
                    value = argv[i] if i < len(argv) else ""
                try:
                    dotted[key] = json.loads(value)
                except ValueError:
                    dotted[key] = value
                i += 1
                continue
        elif arg.startswith("-O") and len(arg) > 2 and ver.compile_alias and not arg.startswith("-O."):
            out += ["-O", arg[2:]] if ver.compile_alias == "compilation-config" else ["--optimization-level", arg[2:]]
            i += 1
            continue
        elif arg == "-O" and ver.compile_alias == "optimization-level":
            arg = "--optimization-level"
        out.append(arg)
        i += 1
    if dotted:
        out += ["--speculative-config", json.dumps(dotted)]
    return out


@dataclass
class ServeArgs:
    model: str
    served_model_name: str
    tp: int
    max_model_len: int | None
    gpu_memory_utilization: float
    host: str | None
    port: int
    disable_log_stats: bool
    enforce_eager: bool
    seed: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    enable_prefix_caching: bool
    disable_uvicorn_access_log: bool
    speculative_config: dict[str, Any] | None
    per_request_spec_decode_metrics: str
    async_scheduling: bool
    non_default: dict[str, Any]
    # (logger file, message) warnings to log once logging is up
    warnings: list[tuple[str, str]] = field(default_factory=list)


def parse(argv: list[str], ver: VllmVersion) -> ServeArgs:
    """The command line of `vllm serve` (argv without `vllm serve`)."""
    warnings: list[tuple[str, str]] = []
    argv = normalise_argv(argv, ver)
    model_flag = next((a for a in argv if a == "--model" or a.startswith("--model=")), None)
    if model_flag is not None and ver.model_option == "error":
        raise ConfigError(
            "ValueError: With `vllm serve`, you should provide the model as a positional argument or in a config "
            "file instead of via the `--model` option.",
            where="vllm/utils/__init__.py",
        )
    parser = build_parser(ver)
    try:
        ns, unknown = parser.parse_known_args(argv)
    except SystemExit as exc:  # argparse already printed usage + error
        raise UsageError("") from exc
    if unknown:
        raise UsageError(TOP_USAGE + f"vllm: error: unrecognized arguments: {' '.join(unknown)}\n")
    if model_flag is not None:
        removal = "in v0.13" if ver.model_option == "warn_v013" else "in a future version"
        warnings.append(
            (
                "utils.py:1861",
                "With `vllm serve`, you should provide the model as a positional argument or in a config file "
                f"instead of via the `--model` option. The `--model` option will be removed {removal}.",
            )
        )
        if ns.model_tag is None:
            ns.model_tag = ns.model
    if ns.model_tag is None:
        raise UsageError(SERVE_USAGE + "vllm serve: error: the following arguments are required: model_tag\n")
    if getattr(ns, "disable_log_requests", False) and ver.disable_log_requests == "deprecated":
        warnings.append(
            (
                "argparse_utils.py:62",
                "argument '--disable-log-requests' is deprecated and replaced with '--enable-log-requests'. "
                "This will be removed in v0.12.0.",
            )
        )
    spec = ns.speculative_config
    if ver.spec_shorthands:
        short = {"method": ns.spec_method, "model": ns.spec_model, "num_speculative_tokens": ns.spec_tokens}
        for key, flag in (
            ("method", "--spec-method"),
            ("model", "--spec-model"),
            ("num_speculative_tokens", "--spec-tokens"),
        ):
            if short[key] is None:
                continue
            if spec and key in spec:
                raise ConfigError(f"ValueError: {flag} and --speculative-config['{key}'] are mutually exclusive")
            spec = {**(spec or {}), key: short[key]}
    if spec is not None and not isinstance(spec, dict):
        raise UsageError(SERVE_USAGE + "vllm serve: error: argument --speculative-config: invalid loads value\n")
    defaults = vars(parser.parse_args([ns.model_tag]))
    non_default = {"model_tag": ns.model_tag}
    for key, value in vars(ns).items():
        if key not in ("model_tag", "help") and value != defaults.get(key):
            non_default[key] = value
    if spec is not None and "speculative_config" not in non_default:
        non_default["speculative_config"] = spec
    served = ns.served_model_name[0] if ns.served_model_name else ns.model_tag
    return ServeArgs(
        model=ns.model_tag,
        served_model_name=served,
        tp=ns.tensor_parallel_size,
        max_model_len=ns.max_model_len,
        gpu_memory_utilization=ns.gpu_memory_utilization,
        host=ns.host,
        port=ns.port,
        disable_log_stats=ns.disable_log_stats,
        enforce_eager=ns.enforce_eager,
        seed=ns.seed,
        max_num_seqs=ns.max_num_seqs,
        max_num_batched_tokens=ns.max_num_batched_tokens,
        enable_prefix_caching=ns.enable_prefix_caching is not False,
        disable_uvicorn_access_log=ns.disable_uvicorn_access_log,
        speculative_config=spec,
        per_request_spec_decode_metrics=getattr(ns, "per_request_spec_decode_metrics", "none"),
        async_scheduling=bool(getattr(ns, "async_scheduling", False)),
        non_default=non_default,
        warnings=warnings,
    )


# -- models and the speculative config ---------------------------------------------------------------------------


def read_model_config(path: str) -> dict[str, Any]:
    config = Path(path) / "config.json"
    if not config.is_file():
        # transformers' message for a path that is not a model directory (vLLM resolves the config through it)
        raise ConfigError(
            f"OSError: Can't load the configuration of '{path}'. If you were trying to load it from "
            "'https://huggingface.co/models', make sure you don't have a local directory with the same name. "
            f"Otherwise, make sure '{path}' is the correct path to a directory containing a config.json file",
            where="transformers/configuration_utils.py",
        )
    data: dict[str, Any] = json.loads(config.read_text())
    return data


def weights_bytes(path: str, default: int) -> int:
    try:
        index = json.loads((Path(path) / "model.safetensors.index.json").read_text())
    except (OSError, ValueError):
        return default
    return int(index.get("metadata", {}).get("total_size", default))


def shard_count(path: str) -> int:
    try:
        index = json.loads((Path(path) / "model.safetensors.index.json").read_text())
    except (OSError, ValueError):
        return 1
    return max(1, len(set(index.get("weight_map", {}).values())))


# SpeculativeConfig's keys per version (reference §1.2).
_SPEC_KEYS = {
    "method",
    "model",
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "max_model_len",
    "revision",
    "code_revision",
    "quantization",
    "disable_by_batch_size",
    "prompt_lookup_max",
    "prompt_lookup_min",
}
_SPEC_KEYS_033 = {
    "num_speculative_tokens_per_batch_size",
    "draft_load_config",
    "rejection_sample_method",
    "synthetic_acceptance_rates",
    "parallel_drafting",
    "use_local_argmax_reduction",
    "attention_backend",
    "kv_cache_dtype",
    "tensor_parallel_size",
}
# The methods the simulator serves, and the version each arrives in (the reference's 0.33 Literal lists dflash and
# dspark; draft_model runs from 0.17 on, where vLLM checks its vocabulary; mtp's and suffix's first versions among
# simhost's profiles are guesses). The other names vLLM knows fail with its own error.
SIMULATED_METHODS = ("eagle3", "eagle", "ngram", "mtp", "suffix", "draft_model", "dflash", "dspark")
METHOD_SINCE = {"mtp": "0.11.0", "suffix": "0.13.0", "draft_model": "0.17.1", "dflash": "0.33.0", "dspark": "0.33.0"}
# SpeculativeConfig's suffix-decoding keys and their defaults (vLLM's `_validate_suffix_decoding`).
SUFFIX_DEFAULTS = {
    "suffix_decoding_max_tree_depth": 24,
    "suffix_decoding_max_cached_requests": 10000,
    "suffix_decoding_max_spec_factor": 1.0,
    "suffix_decoding_min_token_prob": 0.1,
}


def methods_of(ver: VllmVersion) -> tuple[str, ...]:
    return tuple(m for m in SIMULATED_METHODS if m not in METHOD_SINCE or ver.at_least(METHOD_SINCE[m]))


def spec_keys(ver: VllmVersion) -> set[str]:
    keys = set(_SPEC_KEYS)
    if ver.at_least("0.10.1") and not ver.at_least("0.23.0"):
        keys.add("speculative_token_tree")
    if ver.at_least("0.11.0"):
        keys |= {"disable_padded_drafter_batch", "enforce_eager"}
    if ver.at_least("0.33.0"):
        keys |= _SPEC_KEYS_033
    if ver.at_least(METHOD_SINCE["suffix"]):
        keys |= set(SUFFIX_DEFAULTS)
    return keys


@dataclass(frozen=True)
class Speculative:
    method: str  # one of SIMULATED_METHODS
    model: str | None
    num_spec_tokens: int
    draft_tp: int
    draft_max_model_len: int | None
    draft_config: dict[str, Any] | None
    prompt_lookup: tuple[int, int] | None = None  # ngram: (min, max)


@dataclass(frozen=True)
class EngineSetup:
    """What the API server resolved before starting the engine."""

    args: ServeArgs
    target: dict[str, Any]
    max_model_len: int
    spec: Speculative | None
    max_num_seqs: int
    max_num_batched_tokens: int

    @property
    def architecture(self) -> str:
        return str((self.target.get("architectures") or ["LlamaForCausalLM"])[0])


def derived_max_model_len(config: dict[str, Any]) -> int:
    return int(config.get("max_position_embeddings") or 2048)


def resolve(a: ServeArgs, ver: VllmVersion, gpu_mib: int, allow_long_max_model_len: bool = False) -> EngineSetup:
    """ModelConfig then SpeculativeConfig, as the API server builds them; raises ConfigError with vLLM's text.
    `allow_long_max_model_len`: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (the API server logs vLLM's warning)."""
    target = read_model_config(a.model)
    derived = derived_max_model_len(target)
    max_len = a.max_model_len or derived
    if a.max_model_len and a.max_model_len > derived and not allow_long_max_model_len:
        message = (
            f"User-specified max_model_len ({a.max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={derived} or model_max_length=None in model's config.json). To allow "
            "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN "
            "must be used with extreme caution. If the model uses relative position encoding (RoPE), positions "
            "exceeding derived_max_model_len lead to nan. If the model uses absolute position encoding, positions "
            "exceeding derived_max_model_len will cause a CUDA array out-of-bounds error."
        )
        if ver.at_least("0.10.0"):  # ModelConfig is a pydantic dataclass there (0.10 boundary: a guess)
            raise ConfigError(
                pydantic_value_error("ModelConfig", message, {"model": a.model, "max_model_len": a.max_model_len}),
                where="vllm/config/model.py",
            )
        raise ConfigError(f"ValueError: {message}", where="vllm/config.py")
    spec = _speculative(a, ver, target, max_len) if a.speculative_config is not None else None
    if spec is not None and a.async_scheduling and not ver.at_least("0.13.0"):
        # the 0.11 text (reference §4.4); later versions are assumed to allow the pair
        raise ConfigError("ValueError: Currently, speculative decoding is not supported with async scheduling.")
    big_gpu = gpu_mib >= 70 * 1024
    return EngineSetup(
        args=a,
        target=target,
        max_model_len=max_len,
        spec=spec,
        max_num_seqs=a.max_num_seqs or (1024 if big_gpu else 256),
        max_num_batched_tokens=a.max_num_batched_tokens or (8192 if big_gpu else 2048),
    )


def _speculative(a: ServeArgs, ver: VllmVersion, target: dict[str, Any], max_len: int) -> Speculative:
    raw = dict(a.speculative_config or {})

    def fail(message: str) -> ConfigError:
        return ConfigError(pydantic_value_error("SpeculativeConfig", message, raw), where="vllm/config/speculative.py")

    unknown = [key for key in raw if key not in spec_keys(ver)]
    if unknown:
        key = unknown[0]
        value = raw[key]
        return_text = (
            f"pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n{key}\n"
            f"  Unexpected keyword argument [type=unexpected_keyword_argument, input_value={value!r}, "
            f"input_type={type(value).__name__}]\n"
            "    For further information visit https://errors.pydantic.dev/2.11/v/unexpected_keyword_argument"
        )
        raise ConfigError(return_text, where="vllm/config/speculative.py")
    model = raw.get("model")
    method = raw.get("method")
    if method is None and model:
        # 0.10+ auto-detection by the draft path (reference §1.2); anything else would be a draft model
        lowered = str(model).lower()
        method = "eagle3" if "eagle3" in lowered else "eagle" if "eagle" in lowered else "draft_model"
    tokens = raw.get("num_speculative_tokens")
    if method in ("eagle3", "eagle", "draft_model") and model is None:
        if tokens is not None:
            raise fail("num_speculative_tokens was provided but without speculative model.")
    if method == "draft_model" and not ver.at_least(METHOD_SINCE["draft_model"]):
        raise fail(
            "Speculative decoding with draft model is not supported yet. Please consider using other speculative "
            "decoding methods such as ngram, medusa, eagle, or mtp."
        )
    if method not in methods_of(ver):
        raise fail(f"Unknown speculative decoding method: {method}")
    if method == "suffix":
        depth = raw.get("suffix_decoding_max_tree_depth", SUFFIX_DEFAULTS["suffix_decoding_max_tree_depth"])
        if depth < 1:
            raise fail(f"suffix_decoding_max_tree_depth={depth} must be >= 1")
        if tokens is None:
            tokens = depth  # vLLM warns "Defaulted num_speculative_tokens to %s for suffix decoding."
    if tokens is None:
        # from memory of vLLM's SpeculativeConfig (the reference only says "required unless n_predict")
        raise fail(
            "num_speculative_tokens must be provided with speculative model unless the draft model config "
            "contains an n_predict parameter."
        )
    if not isinstance(tokens, int) or tokens <= 0:
        if ver.spec_tokens_gt_zero_pydantic:
            raise ConfigError(
                "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
                f"num_speculative_tokens\n  Input should be greater than 0 [type=greater_than, input_value={tokens!r}, "
                f"input_type={type(tokens).__name__}]\n"
                "    For further information visit https://errors.pydantic.dev/2.11/v/greater_than",
                where="vllm/config/speculative.py",
            )
        raise fail(f"Expected num_speculative_tokens to be greater than zero ({tokens}).")
    lookup = None
    if method == "ngram":
        low_raw, high_raw = raw.get("prompt_lookup_min"), raw.get("prompt_lookup_max")
        if low_raw is None:  # both missing: 5 and 5, "arbitrarily chosen" (vLLM); one missing: the other's
            low_raw = 5 if high_raw is None else high_raw
        if high_raw is None:
            high_raw = low_raw
        low, high = int(low_raw), int(high_raw)
        if low < 1:
            raise fail(f"prompt_lookup_min={low} must be > 0")
        if high < 1:
            raise fail(f"prompt_lookup_max={high} must be > 0")
        if low > high:
            raise fail(f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}")
        lookup = (int(low), int(high))
    if method == "mtp" and model is None:
        model = a.model  # the MTP layers are the target's own
    draft_config = read_model_config(str(model)) if method not in ("ngram", "suffix") else None
    if method == "mtp" and draft_config is not None:
        if not int(draft_config.get("num_nextn_predict_layers") or 0):
            # a guess at vLLM's words: the MTP model config needs its n_predict from num_nextn_predict_layers
            raise fail(f"The model {model} has no MTP layers (num_nextn_predict_layers is 0): it cannot run mtp.")
        draft_config = drafts.in_checkpoint("EAGLE", draft_config, {})[0]  # its MTP layer(s) only
    if method == "draft_model" and draft_config is not None:
        target_vocab, draft_vocab = int(target.get("vocab_size", 0)), int(draft_config.get("vocab_size", 0))
        if target_vocab != draft_vocab:
            raise fail(
                "Target and draft model should have the same vocabulary size. "
                f"Target model vocab_size={target_vocab}. Draft model vocab_size={draft_vocab}. "
                "Using models with different tokenizers can cause out-of-bounds errors during speculative decoding."
            )
    draft_tp = raw.get("draft_tensor_parallel_size") or a.tp
    if draft_tp not in (1, a.tp):
        raise fail(
            f"speculative_draft_tensor_parallel_size={draft_tp} cannot be other value than 1 or target model "
            "tensor_parallel_size"
        )
    draft_len = raw.get("max_model_len")
    if draft_config is not None and draft_len is not None:
        draft_max = derived_max_model_len(draft_config)
        if draft_len > draft_max:
            raise fail(f"speculative_max_model_len={draft_len} cannot be larger than draft_max_model_len={draft_max}")
        if draft_len > max_len:
            raise fail(f"speculative_max_model_len={draft_len} cannot be larger than target_max_model_len={max_len}")
    if method == "eagle3":
        allowed = ver.eagle3_targets
        model_type = str(target.get("model_type", ""))
        if allowed is not None and not any(name in model_type for name in allowed):
            raise fail(ver.eagle3_gate_message(model_type))
    return Speculative(
        method=method,
        model=str(model) if model is not None else None,
        num_spec_tokens=tokens,
        draft_tp=int(draft_tp),
        draft_max_model_len=draft_len,
        draft_config=draft_config,
        prompt_lookup=lookup,
    )
