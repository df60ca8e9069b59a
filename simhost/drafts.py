"""What a draft is made of when it is no separate model (pure): MTP heads and DSpark layers live in the target's own
checkpoint (`--speculative-draft-model-path` = the model path, as SGLang sets it for MTP architectures and for
DSPARK), so their config and weights are a slice of the target's; and the draft/target vocabulary rule."""

from __future__ import annotations

from typing import Any

# DSpark layers in a checkpoint that does not say how many: a guess (a public DSpark draft has 4-5 layers).
DSPARK_LAYERS = 4


def in_checkpoint(
    algorithm: str | None, target: dict[str, Any], target_index: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, index) of the draft the target's own checkpoint holds: its MTP layer(s) (`num_nextn_predict_layers`;
    0 makes the draft worker's weight loading fail, as SGLang's does) or its DSpark layers. The weights are the
    target's per-layer share times the draft's layers; the KV cache one per draft layer, in the target's format."""
    if algorithm == "DSPARK":
        layers = int(target.get("num_dspark_layers") or DSPARK_LAYERS)
        arch = "DSparkDraftModel"
    else:
        layers = int(target.get("num_nextn_predict_layers") or 0)
        arch = str((target.get("architectures") or ["DeepseekV3ForCausalLM"])[0]) + "NextN"
    config = {**target, "architectures": [arch], "num_hidden_layers": layers}
    total = int(target_index.get("metadata", {}).get("total_size", 16 * 2**30))
    per_layer = total / max(1, int(target.get("num_hidden_layers", 32)))
    return config, {"metadata": {"total_size": int(per_layer * max(layers, 1))}, "weight_map": {}}


def vocab_mismatch(algorithm: str | None, target: dict[str, Any], draft: dict[str, Any] | None) -> bool:
    """A STANDALONE draft whose vocabulary is not the target's (it must be: draft token ids are the target's)."""
    if algorithm != "STANDALONE" or not draft:
        return False
    return int(draft.get("vocab_size", 0)) != int(target.get("vocab_size", 0))
