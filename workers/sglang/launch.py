"""The launch command of a server config, and how to read back what the server made of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MODEL_FLAGS = (
    ("model_path", "--model-path"),
    ("served_model_name", "--served-model-name"),
    ("tp_size", "--tp-size"),
)
_SPECULATIVE_FLAGS = (
    ("speculative_algorithm", "--speculative-algorithm"),
    ("speculative_draft_model_path", "--speculative-draft-model-path"),
    ("speculative_num_steps", "--speculative-num-steps"),
    ("speculative_eagle_topk", "--speculative-eagle-topk"),
    ("speculative_num_draft_tokens", "--speculative-num-draft-tokens"),
)


def _is_set(value: Any) -> bool:
    return value is not None and value != ""


def launch_argv(config: Mapping[str, Any], *, host: str, port: int) -> list[str]:
    """The `sglang.launch_server` flags for config; the caller prepends the launcher and quotes.

    Unset options are omitted so SGLang's own defaults (and auto-choices) apply. A baseline (no
    speculative_algorithm) gets no speculative flag at all, even if draft settings were left in config:
    a draft path without an algorithm would only make the effective args disagree with the intent.
    """
    if not _is_set(config.get("model_path")):
        raise ValueError("config needs a model_path")
    argv: list[str] = []
    for key, flag in _MODEL_FLAGS:
        if _is_set(config.get(key)):
            argv += [flag, str(config[key])]
    argv += ["--host", host, "--port", str(port)]
    if _is_set(config.get("speculative_algorithm")):
        for key, flag in _SPECULATIVE_FLAGS:
            if _is_set(config.get(key)):
                argv += [flag, str(config[key])]
    extra_args = config.get("extra_args") or []
    if isinstance(extra_args, str):
        # A string would silently become one flag per character.
        raise TypeError("extra_args must be a list of strings, not a string")
    argv += [str(arg) for arg in extra_args]
    return argv


def with_metrics_enabled(argv: list[str]) -> list[str]:
    """`argv` with `--enable-metrics` when it lacks it: the benchmark cells read the server's Prometheus counters
    (the pooled accept length) and sample its gauges over time, and without the flag SGLang serves no /metrics."""
    return argv if "--enable-metrics" in argv else [*argv, "--enable-metrics"]


def with_adaptive_schedule(argv: list[str], config_path: str | None) -> list[str]:
    """`argv` with SGLang's adaptive speculation reading its schedule from `config_path` (None: `argv` as it is).
    `--speculative-adaptive` is added unless the config's extra args already switch it on."""
    if config_path is None:
        return argv
    switch = [] if "--speculative-adaptive" in argv else ["--speculative-adaptive"]
    return [*argv, *switch, "--speculative-adaptive-config", config_path]


def arg_mismatches(requested: dict[str, Any], effective: dict[str, Any]) -> list[str]:
    """Fields the user set that the server reports differently (SGLang may rewrite some silently)."""
    problems = []
    checks = {
        "tp_size": requested.get("tp_size"),
        "speculative_algorithm": requested.get("speculative_algorithm") or None,
        "speculative_num_steps": requested.get("speculative_num_steps"),
        "speculative_eagle_topk": requested.get("speculative_eagle_topk"),
        "speculative_num_draft_tokens": requested.get("speculative_num_draft_tokens"),
    }
    for key, want in checks.items():
        if want is None or key not in effective:
            continue
        have = effective[key]
        if key == "speculative_algorithm" and want == "NEXTN" and have == "EAGLE":
            continue  # SGLang's documented rewrite
        if have != want:
            problems.append(f"requested {key}={want!r}, the server runs {key}={have!r}")
    return problems
