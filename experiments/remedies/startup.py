"""Remedies of a server that would not start: a draft too short for the target's context, flags SGLang does not
know, a load slower than the profile's timeouts. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from experiments.rules.model_checks import CONTEXT_LENGTH_FLAG, OVERRIDE_ENV, context_length_arg

from .values import Change, Evidence, Link, Remedy, first_line

# SGLang's refusal at start (model_config.py), and specdash's own at preflight (model_checks.context_length_problem).
_SGLANG_CONTEXT = re.compile(r"context_length \((\d+)\) is greater than the derived context_length \((\d+)\)")
_PREFLIGHT_CONTEXT = re.compile(r"max_position_embeddings \((\d+)\) is below the target context length \((\d+)\)")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.+)")


def context_lengths(text: str) -> tuple[int, int] | None:
    """(the target's context length, the most the draft supports) from SGLang's refusal or the preflight's."""
    if match := _SGLANG_CONTEXT.search(text):
        return int(match.group(1)), int(match.group(2))
    if match := _PREFLIGHT_CONTEXT.search(text):
        return int(match.group(2)), int(match.group(1))
    return None


def context_length_remedies(evidence: Evidence, spec: Mapping[str, Any], target: int, limit: int) -> list[Remedy]:
    cited = (
        f"The target's context length ({target} tokens) is more than the draft supports ({limit}), so SGLang "
        "refuses the pair."
    )
    args = list(spec.get("extra_args") or [])
    remedies = []
    if context_length_arg(args) != limit:
        cap = Remedy(
            "context-length",
            f"Serve at most {limit} tokens per request",
            f"{cited} {CONTEXT_LENGTH_FLAG} {limit} caps the target at the draft's limit and the pair starts; "
            f"requests longer than {limit} tokens are then refused.",
            Change(args={CONTEXT_LENGTH_FLAG: str(limit)}),
            label=f"ctx {limit}",
        )
        if evidence.request_tokens and evidence.request_tokens > limit:
            cap = Remedy(
                cap.id,
                cap.title,
                f"{cap.explanation} Not offered as a re-run: this experiment's requests take up to "
                f"{evidence.request_tokens} tokens (input + output), which would all be refused.",
            )
        remedies.append(cap)
    if str((spec.get("env") or {}).get(OVERRIDE_ENV, "")).strip().lower() not in {"1", "true"}:
        remedies.append(
            Remedy(
                "context-override",
                f"Let SGLang run the pair anyway ({OVERRIDE_ENV}=1)",
                f"{cited} {OVERRIDE_ENV}=1 is SGLang's own way past the check, which warns that this “may lead to "
                "incorrect model outputs or CUDA errors”: the draft then sees positions it was not trained on, so "
                "expect its acceptance to fall on long requests.",
                Change(env={OVERRIDE_ENV: "1"}),
                label="ctx override",
            )
        )
    draft = spec.get("speculative_draft_model_path") or "the draft"
    remedies.append(
        Remedy(
            "matching-draft",
            f"Use a draft that supports {target} tokens",
            f"{cited} A draft whose config.json has max_position_embeddings of at least {target} (instead of "
            f"{draft}) keeps the target's full context: a new experiment with that draft model path.",
            link=Link.COPY,
        )
    )
    return remedies


def longer_timeout(evidence: Evidence, which: str) -> Remedy:
    facts = evidence.server_facts
    reached = []
    if facts.get("target_progress") is not None:
        reached.append(f"target weights {facts['target_progress']}%")
    if facts.get("draft_progress") is not None:
        reached.append(f"draft weights {facts['draft_progress']}%")
    if facts.get("capture_s"):
        reached.append("CUDA graphs captured")
    elif facts.get("capture_progress") is not None:
        reached.append(f"CUDA-graph capture {facts['capture_progress']}%")
    progress = f" It had got as far as: {', '.join(reached)}." if reached else ""
    if which == "stall":
        now = f" (now {evidence.stall_timeout_s} s)" if evidence.stall_timeout_s else ""
        return Remedy(
            "stall-timeout",
            "Allow a longer quiet time while loading",
            f"{evidence.message}{progress} A server that loads slowly (weights on a network file system, a large "
            f"draft) can be quiet for longer than the stall timeout{now}: a copy of the experiment with a longer "
            "stall timeout in its profile tells a slow load from a hung one.",
            link=Link.COPY,
        )
    now = f" (now {evidence.readiness_timeout_s} s)" if evidence.readiness_timeout_s else ""
    return Remedy(
        "readiness-timeout",
        "Give the server longer to become ready",
        f"{evidence.message}{progress} If it was still making progress, a copy of the experiment with a longer "
        f"readiness timeout{now} in its profile lets it finish.",
        link=Link.COPY,
    )


def drop_unknown_args(evidence: Evidence, spec: Mapping[str, Any]) -> Remedy | None:
    match = _UNRECOGNIZED.search(evidence.message)
    args = list(spec.get("extra_args") or [])
    unknown = tuple(token for token in (match.group(1).split() if match else []) if token in args)
    if not unknown:
        return None
    return Remedy(
        "drop-unknown-args",
        f"Drop what this SGLang does not know: {' '.join(unknown)}",
        f"SGLang refused its command line: “{first_line(evidence.message)}”. These extra arguments of the config "
        "are not flags of the SGLang on this host (renamed or removed in its version, or mistyped).",
        Change(drop=unknown),
        label=f"without {unknown[0]}",
    )
