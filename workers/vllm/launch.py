"""The `vllm serve` command of a server config, and how to read back what the server made of it.

The words come from `experiments.rules.launch_fields`' vLLM rows: the target as the positional model (`vllm serve`
refuses `--model` in 0.8.5-0.11 and moves it in 0.13+, reference §1.1), the served name and the tensor parallel size
as flags, the speculative rows as one `--speculative-config` JSON. Metrics need no flag: vLLM logs its stats and
serves `/metrics` unless `--disable-log-stats`, which the launch policy refuses in extra args. SGLang's adaptive
schedule has no vLLM counterpart (its speculative config has no such key), so none is passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiments.rules import launch_fields


def launch_argv(config: Mapping[str, Any], *, host: str, port: int) -> list[str]:
    """`MODEL --served-model-name N --tensor-parallel-size T --host H --port P --speculative-config {...}` then the
    extra args; the caller prepends the launcher (`vllm serve`) and quotes."""
    if not launch_fields.is_set(config.get("model_path")):
        raise ValueError("config needs a model_path")
    positional, flags = launch_fields.launch_words(launch_fields.VLLM, config, ("--host", host, "--port", str(port)))
    extra_args = config.get("extra_args") or []
    if isinstance(extra_args, str):
        # A string would silently become one flag per character.
        raise TypeError("extra_args must be a list of strings, not a string")
    return [*positional, *flags, *(str(arg) for arg in extra_args)]


def arg_mismatches(requested: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
    """The verified fields (`tensor_parallel_size`, `method`, `model`, `num_spec_tokens` of the engine config line)
    the server runs otherwise than asked."""
    return launch_fields.effective_mismatches(launch_fields.VLLM, requested, effective)
