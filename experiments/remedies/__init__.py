"""What a person would try after a failed run, read from the failure's evidence and the config that failed. Pure.

Context length -> cap the context at the draft's limit, SGLang's override env var, or a matching draft; GPU OOM -> a
lower --mem-fraction-static or --cuda-graph-max-bs (a higher fraction when SGLang says the KV pool got too little);
a CUDA-graph capture that crashed -> no CUDA graphs; a dirty host -> the processes holding GPU memory and a clean by
an admin; env not propagated -> host-level env, set by an admin. A remedy that changes the config says exactly how
(`Change`); `forms/remedies.py` applies it to a copy of the config and validates the copy with the config form, as
it would a hand-made one, and the action saves and queues that copy. Advice (a profile, a host) has no change and
says where it is acted on (`Link`).

One module per concern: `memory` (GPU memory, CUDA graphs), `startup` (context length, flags, timeouts), `host`
(what an admin does), `acceptance` (the likely causes of a draft that accepts nothing, for the live acceptance alarm,
a run warning rather than a failure), `values` (what remedies are made of).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import host, memory, startup
from .acceptance import acceptance_remedies
from .values import (
    SERVER_ARG_NAMES,
    Change,
    Evidence,
    Link,
    Remedy,
    RemedyRefused,
    first_line,
    flag_value,
    server_args_in,
    without_flag,
)

__all__ = [
    "SERVER_ARG_NAMES",
    "Change",
    "Evidence",
    "Link",
    "Remedy",
    "RemedyRefused",
    "acceptance_remedies",
    "flag_value",
    "remedies_for",
    "server_args_in",
    "without_flag",
]


def remedies_for(evidence: Evidence, spec: Mapping[str, Any]) -> list[Remedy]:
    """The remedies of a failure for the config whose launch spec is `spec`, the likeliest to help first."""
    kind, text = evidence.kind, evidence.text
    found: list[Remedy | None] = []
    lengths = startup.context_lengths(text)
    if lengths and kind in ("context_length", "preflight"):
        found += startup.context_length_remedies(evidence, spec, *lengths)
    elif kind == "oom":
        found += memory.gpu_oom_remedies(evidence, spec)
    elif kind == "crashed" and memory.CAPTURE_FAILED.search(text):
        found.append(
            memory.disable_graphs(
                evidence, spec, f"Capturing CUDA graphs failed: “{first_line(text, memory.CAPTURE_FAILED)}”."
            )
        )
    elif kind == "host_oom":
        found.append(host.free_host_memory(evidence))
    elif kind in ("zombie", "readiness_timeout"):
        found.append(startup.longer_timeout(evidence, "stall" if kind == "zombie" else "readiness"))
    elif kind == "env_not_propagated":
        found.append(host.host_env(evidence, spec))
    elif kind == "misconfigured":
        found.append(startup.drop_unknown_args(evidence, spec))
    found.append(host.clean_host(evidence))
    return [remedy for remedy in found if remedy is not None]
