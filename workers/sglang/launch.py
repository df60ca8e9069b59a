"""The launch command of a server config, and how to read back what the server made of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiments.rules import launch_fields


def launch_argv(config: Mapping[str, Any], *, host: str, port: int) -> list[str]:
    """The `sglang.launch_server` flags for config (`launch_fields`' SGLang rows, then the address and the extra
    args); the caller prepends the launcher and quotes."""
    if not launch_fields.is_set(config.get("model_path")):
        raise ValueError("config needs a model_path")
    _, flags = launch_fields.launch_words(launch_fields.SGLANG, config, ("--host", host, "--port", str(port)))
    extra_args = config.get("extra_args") or []
    if isinstance(extra_args, str):
        # A string would silently become one flag per character.
        raise TypeError("extra_args must be a list of strings, not a string")
    return [*flags, *(str(arg) for arg in extra_args)]


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
    if requested.get("speculative_algorithm") == "NEXTN" and effective.get("speculative_algorithm") == "EAGLE":
        effective = {**effective, "speculative_algorithm": "NEXTN"}  # SGLang's documented rewrite
    return launch_fields.effective_mismatches(launch_fields.SGLANG, requested, effective)
