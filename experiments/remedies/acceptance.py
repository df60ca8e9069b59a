"""The likely causes of a speculative server that accepts (next to) nothing, as remedies: the algorithm does not match
the draft (an EAGLE3 head served as EAGLE), the draft was not made for this target, or the draft's checkpoint did
not load its weights. Each says what the models' config.json files prove where they were read, and what to check
where they say nothing. Advice only: none changes the config by itself. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiments.rules import model_checks

from .values import Remedy


def acceptance_remedies(
    algorithm: str | None, target_config: Mapping[str, Any] | None, draft_config: Mapping[str, Any] | None
) -> list[Remedy]:
    """The causes of an acceptance collapse of a config running `algorithm`, the likeliest first; the configs are
    the models' config.json (None: not read)."""
    algorithm = (algorithm or "").upper()
    if algorithm == "NGRAM":
        return [
            Remedy(
                "ngram-no-match",
                "Expect little from n-gram speculation on these prompts",
                "NGRAM drafts tokens by finding the recent text again in the prompt and output; prompts that do not "
                "repeat themselves (random token ids, short open conversation) give it nothing to accept. Try a "
                "prompt set like the real traffic, or an EAGLE3 draft.",
            )
        ]
    return [_algorithm(algorithm, draft_config), _pair(target_config, draft_config), _weights(draft_config)]


def _algorithm(algorithm: str, draft_config: Mapping[str, Any] | None) -> Remedy:
    architecture = model_checks.architecture_of(draft_config)
    problem = model_checks.algorithm_problem(algorithm, draft_config)
    if problem:
        return Remedy(
            "eagle3-algorithm",
            "Serve this EAGLE3 draft with --speculative-algorithm EAGLE3",
            f"{problem} Set the config's speculative algorithm to EAGLE3 and run it again.",
        )
    if algorithm == "EAGLE3" and architecture and not model_checks.is_eagle3_draft(draft_config):
        return Remedy(
            "eagle-algorithm",
            "Check that this draft is an EAGLE3 head",
            f"The draft model's config.json says {architecture}, not an EAGLE3 class (…Eagle3), and this config "
            "runs --speculative-algorithm EAGLE3. An EAGLE (v1) head needs --speculative-algorithm EAGLE.",
        )
    known = f" (its config.json says {architecture})" if architecture else ""
    return Remedy(
        "algorithm",
        "Check that the algorithm matches the draft",
        f"An EAGLE3 draft served with --speculative-algorithm EAGLE accepts nothing, with no error and no warning. "
        f"The draft's config.json names its class{known}: …Eagle3 needs EAGLE3, an EAGLE head EAGLE.",
    )


def _pair(target_config: Mapping[str, Any] | None, draft_config: Mapping[str, Any] | None) -> Remedy:
    if target_config is not None and draft_config is not None:
        differences = model_checks.pair_differences(target_config, draft_config)
        if differences:
            return Remedy(
                "draft-target-mismatch",
                "Use a draft trained for this target",
                f"The models' config.json files disagree: {'; '.join(differences)}. A draft made for another target "
                "proposes tokens this one rejects.",
            )
        return Remedy(
            "draft-target-mismatch",
            "Check that the draft was trained for this target",
            "The draft's vocab_size, hidden_size and max_position_embeddings agree with the target's, so a "
            "mismatch would be subtler: a draft trained for another model or revision of the same shape, or with "
            "another tokenizer or chat template.",
        )
    return Remedy(
        "draft-target-mismatch",
        "Check that the draft was trained for this target",
        "A draft made for another target proposes tokens this one rejects: compare the two config.json files "
        "(vocab_size, hidden_size, max_position_embeddings) and the model the draft was trained against.",
    )


def _weights(draft_config: Mapping[str, Any] | None) -> Remedy:
    architecture = model_checks.architecture_of(draft_config) or "the draft's class"
    return Remedy(
        "draft-weights",
        "Check that the draft checkpoint loads its weights",
        "A checkpoint whose weight names the draft's model class does not expect (a training wrapper's prefix, a "
        "checkpoint not converted for SGLang, missing embedding or lm_head weights) can load without an error and "
        "leave the draft untrained, so it proposes nothing the target accepts. Check that the draft directory holds "
        f"the *.safetensors files its index names, with the weight names {architecture} expects.",
    )
