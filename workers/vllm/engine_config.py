"""The effective config a vLLM engine logs at start: `Initializing a V1 LLM engine (v%s) with config: %s`
(../shared/reference/vllm-interface.md §1.2), read into the args the run verifies and shows. Pure."""

from __future__ import annotations

import ast
import math
import re
from typing import Any

_SPECULATIVE_REPR = re.compile(r"^SpeculativeConfig\((.*)\)$", re.DOTALL)


def engine_config(text: str) -> dict[str, Any]:
    """The `key=value, ...` fields of `Initializing a V1 LLM engine (v...) with config: ...` (§1.2).

    Values are Python literals where they are one (`max_seq_len=8192`, `enforce_eager=False`, `model='/m'`), else the
    text as logged (`dtype=torch.bfloat16`, `served_model_name=Qwen3-32B`). The speculative config's fields are also
    given at the top level under the names vLLM's launch fields are verified by (`method`, `model`,
    `num_spec_tokens`), so `model` is the draft's; the target's model is `model_path` (a baseline has no `model`).
    """
    args: dict[str, Any] = {}
    for piece in _split_top_level(text):
        key, separator, value = piece.partition("=")
        key = key.strip()
        if separator and key.isidentifier():
            args[key] = _value(value)
    if "model" in args:
        args["model_path"] = args.pop("model")
    speculative = _SPECULATIVE_REPR.match(str(args.get("speculative_config", "")).strip())
    if speculative is not None:
        fields = {}
        for piece in _split_top_level(speculative[1]):
            key, separator, value = piece.partition("=")
            if separator and key.strip().isidentifier():
                fields[key.strip()] = _value(value)
        args["speculative_config"] = fields
        for key in ("method", "model", "num_spec_tokens"):
            if key in fields:
                args[key] = fields[key]
    return args


def _value(text: str) -> Any:
    """A JSON-storable literal from a repr (numbers, strings, booleans, None, their lists and dicts), else the text:
    an enum, an object, `...`, `inf` stay as logged."""
    text = text.strip()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return value if _storable(value) else text


def _storable(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if value is None or isinstance(value, str | int | bool):
        return True
    if isinstance(value, list):
        return all(_storable(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _storable(item) for key, item in value.items())
    return False


def _split_top_level(text: str) -> list[str]:
    """`a=[1, 2], b='x, y', c=<Mode.FULL: (2, 1)>` -> three pieces: commas inside brackets, quotes and `<...>` reprs
    do not split."""
    pieces: list[str] = []
    depth, quote, start, index = 0, "", 0, 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{" or (char == "<" and text[index + 1 : index + 2].isalpha()):
            depth += 1
        elif char in ")]}>" and depth:
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(text[start:index])
            start = index + 1
        index += 1
    pieces.append(text[start:])
    return [piece.strip() for piece in pieces if piece.strip()]
