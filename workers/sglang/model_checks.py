"""What SGLang refuses about a target and draft model pair, read from their config.json files. Pure.

Checked before a launch so that a bad pair fails in seconds with a remedy, not minutes into loading weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OVERRIDE_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def context_length_problem(
    target_config: Mapping[str, Any],
    draft_config: Mapping[str, Any],
    *,
    context_length: int | None,
    env: Mapping[str, str],
) -> str | None:
    """SGLang refuses a draft whose max_position_embeddings is below the target's context length."""
    target_len = context_length or _context_length_of(target_config)
    draft_len = _context_length_of(draft_config)
    if target_len is None or draft_len is None or draft_len >= target_len:
        return None
    # SGLang's EnvBool accepts exactly these spellings; anything else still fails at start.
    if env.get(OVERRIDE_ENV, "").strip().lower() in {"1", "true"}:
        return None
    return (
        f"The draft model's max_position_embeddings ({draft_len}) is below the target context length "
        f"({target_len}); SGLang would fail at start with a context_length ValueError. Use a matching draft, "
        f"pass --context-length {draft_len}, or set {OVERRIDE_ENV}=1 in the config's environment."
    )


def vocab_problem(target_config: Mapping[str, Any], draft_config: Mapping[str, Any]) -> str | None:
    target_vocab = _text_config(target_config).get("vocab_size")
    draft_vocab = _text_config(draft_config).get("vocab_size")
    if isinstance(target_vocab, int) and isinstance(draft_vocab, int) and target_vocab != draft_vocab:
        return (
            f"The draft model's vocab_size ({draft_vocab}) differs from the target's ({target_vocab}); "
            "the draft cannot propose tokens the target understands."
        )
    return None


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    # Multimodal configs nest the language model's fields.
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def _context_length_of(config: Mapping[str, Any]) -> int | None:
    text = _text_config(config)
    for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"):
        value = text.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None
