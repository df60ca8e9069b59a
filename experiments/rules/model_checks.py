"""What SGLang refuses about a target and draft model pair, read from their config.json files, and what a host's
listed models say about a config's paths. Pure.

One copy of the rules for both tiers: the submission checks them against the host's stored model listing, so a
bad pair is refused at submit; the worker's preflight checks them again against the files on the host.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from . import launch_fields

OVERRIDE_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
CONTEXT_LENGTH_FLAG = "--context-length"
# The most model directories a listing reads; a listing this long may have left some out.
MAX_LISTED_MODELS = 200


def context_length_problem(
    target_config: Mapping[str, Any],
    draft_config: Mapping[str, Any],
    *,
    context_length: int | None,
    env: Mapping[str, str],
) -> str | None:
    """SGLang refuses a draft whose max_position_embeddings is below the target's context length."""
    target_len = context_length or context_length_of(target_config)
    draft_len = context_length_of(draft_config)
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
    target_vocab = vocab_size_of(target_config)
    draft_vocab = vocab_size_of(draft_config)
    if target_vocab is not None and draft_vocab is not None and target_vocab != draft_vocab:
        return (
            f"The draft model's vocab_size ({draft_vocab}) differs from the target's ({target_vocab}); "
            "the draft cannot propose tokens the target understands."
        )
    return None


# The algorithms SGLang runs an EAGLE (v1) draft with: NEXTN is rewritten to EAGLE (reference §1.2).
EAGLE_V1_ALGORITHMS = ("EAGLE", "NEXTN")


def architecture_of(config: Mapping[str, Any] | None) -> str | None:
    """The model class a config.json names first (`architectures`), or None."""
    names = (config or {}).get("architectures")
    if isinstance(names, Sequence) and not isinstance(names, str) and names and isinstance(names[0], str):
        return names[0]
    return None


def is_eagle3_draft(config: Mapping[str, Any] | None) -> bool:
    """An EAGLE3 draft head by its config.json: SGLang's EAGLE3 draft classes are named `...Eagle3`."""
    names = (config or {}).get("architectures")
    if not isinstance(names, Sequence) or isinstance(names, str):
        return False
    return any(isinstance(name, str) and "eagle3" in name.lower() for name in names)


def algorithm_problem(algorithm: str | None, draft_config: Mapping[str, Any] | None) -> str | None:
    """An EAGLE3 draft served with the EAGLE algorithm (or NEXTN, which SGLang turns into EAGLE). SGLang starts,
    serves and accepts no draft token (accept length exactly 1.0), with no error and no warning: users find out
    from a speed-up that never comes. Said before launch, as a warning (the live acceptance alarm says it again)."""
    if (algorithm or "").upper() not in EAGLE_V1_ALGORITHMS or not is_eagle3_draft(draft_config):
        return None
    return (
        f"The draft model's config.json says {architecture_of(draft_config)}, an EAGLE3 draft, and this config runs "
        f"--speculative-algorithm {algorithm}: SGLang serves that pair without an error or a warning but accepts no "
        "draft token (accept length 1.0). Use --speculative-algorithm EAGLE3."
    )


def pair_differences(target_config: Mapping[str, Any], draft_config: Mapping[str, Any]) -> list[str]:
    """Where a draft's config.json disagrees with its target's on what the draft must share with it: the vocabulary,
    the hidden size (an EAGLE head reads the target's hidden states), and the positions it was trained for."""
    found = []
    target_vocab, draft_vocab = vocab_size_of(target_config), vocab_size_of(draft_config)
    if target_vocab is not None and draft_vocab is not None and target_vocab != draft_vocab:
        found.append(f"the draft's vocab_size ({draft_vocab}) differs from the target's ({target_vocab})")
    target_hidden, draft_hidden = _int_field(target_config, "hidden_size"), _int_field(draft_config, "hidden_size")
    if target_hidden is not None and draft_hidden is not None and target_hidden != draft_hidden:
        found.append(f"the draft's hidden_size ({draft_hidden}) differs from the target's ({target_hidden})")
    target_len, draft_len = context_length_of(target_config), context_length_of(draft_config)
    if target_len is not None and draft_len is not None and draft_len < target_len:
        found.append(
            f"the draft's max_position_embeddings ({draft_len}) is below the target's ({target_len}): positions "
            "past it are ones the draft was never trained on"
        )
    return found


def _int_field(config: Mapping[str, Any], key: str) -> int | None:
    value = _text_config(config).get(key)
    return value if isinstance(value, int) and value > 0 else None


def context_length_arg(extra_args: Sequence[str]) -> int | None:
    """The `--context-length N` (or `=N`) of a config's extra launch args; None if absent or not a number."""
    return int_arg(extra_args, CONTEXT_LENGTH_FLAG)


def int_arg(extra_args: Sequence[str], flag: str) -> int | None:
    """The value of `flag N` (or `flag=N`) in a config's extra launch args; None if absent or not a number."""
    for i, arg in enumerate(extra_args):
        value = None
        if arg == flag and i + 1 < len(extra_args):
            value = extra_args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isascii() and value.isdigit():
            return int(value)
    return None


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    # Multimodal configs nest the language model's fields.
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def context_length_of(config: Mapping[str, Any]) -> int | None:
    text = _text_config(config)
    for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"):
        value = text.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def vocab_size_of(config: Mapping[str, Any]) -> int | None:
    value = _text_config(config).get("vocab_size")
    return value if isinstance(value, int) else None


def listed_text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a host's model listing keeps of a config.json, as its `text_config`: the language model's numbers as
    the checks above read them, so that they read a listed model exactly as they read its config.json."""
    return {
        "max_position_embeddings": context_length_of(config),
        "vocab_size": vocab_size_of(config),
        MTP_LAYER_KEYS[0]: mtp_layers_of(config),
    }


# Where a checkpoint's config.json counts the MTP (next-n prediction) layers it ships beside the model's own:
# DeepSeek-V3, GLM-4.5 and MiMo say num_nextn_predict_layers, Qwen3-Next mtp_num_hidden_layers.
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


def mtp_layers_of(config: Mapping[str, Any] | None) -> int | None:
    """The MTP layers a config.json (or a listing's entry) says the checkpoint has; 0 for a config.json that names
    none; None where that is not known (a listing made before the count was kept, a config that was not read)."""
    config = config or {}
    for where in (_text_config(config), config):
        for key in MTP_LAYER_KEYS:
            if key in where:
                value = where[key]
                return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
    # A config.json always names its model_type; a listing's entry never does (it keeps the count, or nothing).
    return 0 if "model_type" in config else None


def mtp_problem(engine: str, algorithm: str, target_config: Mapping[str, Any]) -> str | None:
    """Why a method that drafts with the target's own MTP layers (SGLang's NEXTN, vLLM's mtp) cannot run on a
    target whose checkpoint has none, or None (it has some, or nothing is known). For a config without a draft
    path: one that names a head exported apart drafts with that head."""
    if algorithm not in launch_fields.MTP_METHODS.get(engine or launch_fields.SGLANG, ()):
        return None
    layers = mtp_layers_of(target_config)
    if layers is None or layers > 0:
        return None
    return (
        f"{algorithm} drafts with the MTP layers of the target's own checkpoint, and its config.json has none "
        f"({' / '.join(MTP_LAYER_KEYS)} absent or 0): choose a target with MTP layers, name an exported MTP head "
        "as the draft model, or choose another method."
    )


def listed_model(models_root: str, listing: Sequence[Mapping[str, Any]], path: str) -> Mapping[str, Any] | None:
    """The listing's entry for `path`; raises LookupError when the listing proves that `path` holds no model.

    A listing reads the directories directly under the models root that hold a config.json, so it proves absence
    only for such a directory, and only when it is complete. None: the listing does not know `path`.
    """
    wanted = posixpath.normpath(path)
    for entry in listing:
        if posixpath.normpath(str(entry.get("path", ""))) == wanted:
            return entry
    if models_root and len(listing) < MAX_LISTED_MODELS:
        if posixpath.dirname(wanted) == posixpath.normpath(models_root):
            raise LookupError(path)
    return None


# ---- by engine --------------------------------------------------------------------------------------------------

VLLM_LONG_MAX_MODEL_LEN_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
VLLM_MAX_MODEL_LEN_FLAG = "--max-model-len"


def vllm_max_model_len_problem(
    target_config: Mapping[str, Any],
    draft_config: Mapping[str, Any] | None,
    *,
    max_model_len: int | None,
    draft_max_model_len: int | None,
    env: Mapping[str, str],
) -> str | None:
    """What vLLM refuses about the lengths (vllm-interface.md §1.2, §1.4): a `--max-model-len` past the target's
    derived length (unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), a draft `max_model_len` past the draft's own or the
    target's. A draft shorter than the target is no error in vLLM (it drafts up to its own length), unlike SGLang."""
    target_len = context_length_of(target_config)
    allow_long = env.get(VLLM_LONG_MAX_MODEL_LEN_ENV, "").strip().lower() in {"1", "true"}
    if max_model_len is not None and target_len is not None and max_model_len > target_len and not allow_long:
        return (
            f"vLLM would refuse --max-model-len {max_model_len}: User-specified max_model_len ({max_model_len}) is "
            f"greater than the derived max_model_len (max_position_embeddings={target_len} in model's config.json). "
            f"Lower it, or set {VLLM_LONG_MAX_MODEL_LEN_ENV}=1 in the config's environment."
        )
    draft_len = context_length_of(draft_config) if draft_config is not None else None
    if draft_max_model_len is not None and draft_len is not None and draft_max_model_len > draft_len:
        return (
            f"vLLM would refuse the draft's max_model_len: speculative_max_model_len={draft_max_model_len} cannot be "
            f"larger than draft_max_model_len={draft_len}."
        )
    limit = max_model_len or target_len
    if draft_max_model_len is not None and limit is not None and draft_max_model_len > limit:
        return (
            f"vLLM would refuse the draft's max_model_len: speculative_max_model_len={draft_max_model_len} cannot be "
            f"larger than max_model_len={limit}."
        )
    return None


def _vllm_draft_model_vocab_problem(
    spec: Mapping[str, Any], target_config: Mapping[str, Any], draft_config: Mapping[str, Any]
) -> str | None:
    """vLLM's own refusal of a `draft_model` draft of another vocabulary (0.17+, its draft_model proposer;
    vllm-interface.md §4.3), in its words."""
    target_vocab, draft_vocab = vocab_size_of(target_config), vocab_size_of(draft_config)
    if spec.get("speculative_algorithm") != "draft_model" or None in (target_vocab, draft_vocab):
        return None
    if target_vocab == draft_vocab:
        return None
    return (
        "vLLM refuses this pair: 'Target and draft model should have the same vocabulary size. Target model "
        f"vocab_size={target_vocab}. Draft model vocab_size={draft_vocab}. Using models with different tokenizers can "
        "cause out-of-bounds errors during speculative decoding.'"
    )


def pair_problem(
    engine: str,
    target_config: Mapping[str, Any],
    draft_config: Mapping[str, Any],
    *,
    spec: Mapping[str, Any],
    env: Mapping[str, str],
) -> str | None:
    """Why `engine` would refuse a config's (`spec`: its launch spec) target and draft pair, in its words, or None."""
    extra_args = spec.get("extra_args") or []
    if engine == "vllm":
        options = spec.get("engine_options") or {}
        draft_len = options.get("draft_max_model_len")
        return (
            vllm_max_model_len_problem(
                target_config,
                draft_config,
                max_model_len=int_arg(extra_args, VLLM_MAX_MODEL_LEN_FLAG),
                draft_max_model_len=draft_len if isinstance(draft_len, int) else None,
                env=env,
            )
            or _vllm_draft_model_vocab_problem(spec, target_config, draft_config)
            or vocab_problem(target_config, draft_config)
        )
    return context_length_problem(
        target_config, draft_config, context_length=context_length_arg(extra_args), env=env
    ) or vocab_problem(target_config, draft_config)
