"""Pure checks made before a launch, on facts read from the host (nvidia-smi output, model config.json)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OVERRIDE_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


@dataclass(frozen=True)
class ComputeApp:
    pid: int
    used_mib: int
    gpu_index: int | None = None


def parse_compute_apps(csv_text: str) -> list[ComputeApp]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` -> apps."""
    apps = []
    for line in csv_text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        try:
            used = int(float(parts[1]))
        except ValueError:
            # Some drivers (and MIG) report "[N/A]": the process still holds the GPU, we just don't know how much.
            used = 0
        gpu = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
        apps.append(ComputeApp(pid=int(parts[0]), used_mib=used, gpu_index=gpu))
    return apps


def parse_gpu_inventory(csv_text: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader,nounits` -> GPUs."""
    gpus = []
    for line in csv_text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        try:
            gpus.append(
                {
                    "index": int(parts[0]),
                    "name": parts[1],
                    "memory_used_mib": int(float(parts[2])),
                    "memory_total_mib": int(float(parts[3])),
                }
            )
        except ValueError:
            continue
    return gpus


def describe_busy_gpus(apps: list[ComputeApp]) -> str:
    held = ", ".join(
        f"pid {a.pid} holds {a.used_mib} MiB" if a.used_mib else f"pid {a.pid} holds GPU memory (amount not reported)"
        for a in apps
    )
    return f"GPUs are busy: {held}. Stop those processes (or clean the host) before running here."


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
