"""The startup and runtime warnings of a vLLM log worth surfacing on the run and the comparison, each with the line it
came from: eager mode, no stats logged (so no acceptance), KV cache preemptions, a max_model_len past the model's, a
KV cache that holds less than one full-length request, a draft's context changed by vLLM, the V0 fallback,
deprecations. Texts per version follow
../shared/reference/vllm-interface.md §1.3, §1.4, §2.4, §3.1, §4.3; every era's prefixes are read.

Pure. A warning's message is the same for every occurrence of its kind and cause, so a run records it once.
`Reducing Torch parallelism ...` (vLLM setting OMP_NUM_THREADS) is not one: it changes nothing measured.
"""

from __future__ import annotations

import re

from ..engines.facts import ServerWarning
from .loglines import message_of

_DEPRECATED = ("is deprecated", "will be removed in", "deprecationwarning", "futurewarning")
# `Maximum concurrency for 8,192 tokens per request: 0.85x`: below 1x the KV cache holds less than one request of the
# full context. (V1 refuses to start below one request, §4.2; the line is read for any engine that logs it anyway.)
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: (\d+(?:\.\d+)?)x")
_PREEMPTIONS = re.compile(r"(?:Engine \d+|Engines Aggregated):.*\bPreemptions: (\d+)")
_V0_PREEMPTED = re.compile(r"is preempted by PreemptionMode\.\w+ mode because there is not enough KV cache space")

EAGER = ServerWarning(
    "eager_mode",
    "The server runs in eager mode (--enforce-eager): no CUDA graphs and no torch.compile, so each decode step pays "
    "for its kernel launches: slower than a tuned deployment, for the target and the draft alike.",
)
NO_STATS = ServerWarning(
    "no_log_stats",
    "The server runs with --disable-log-stats: it logs no stats or SpecDecoding lines and serves no vllm:* metrics, "
    "so the server's acceptance (live and per cell) cannot be read.",
)
PREEMPTION = ServerWarning(
    "kv_preemption",
    "The KV cache ran out and requests were preempted (recomputed later): throughput and latency include the retries.",
)
LONG_MAX_MODEL_LEN = ServerWarning(
    "long_max_model_len",
    "The server runs a max_model_len past the model's own (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1): positions past the "
    "model's trained length give wrong outputs or crash, and the draft's too.",
)
V0_FALLBACK = ServerWarning(
    "v0_fallback",
    "vLLM fell back to its V0 engine for speculative decoding (0.8.x): V0 has no EAGLE-3, and its figures are not "
    "V1's.",
)


def find_warning(line: str) -> ServerWarning | None:
    """The warning one log line carries, or None."""
    message = message_of(line).strip()
    if not message:
        return None
    if message.startswith(("Cudagraph is disabled under eager mode", "Enforce eager set, disabling torch.compile")):
        return EAGER
    if message.startswith(("non-default args:", "args:")) and re.search(r"disable_log_stats'?[=:] ?True", message):
        return NO_STATS
    if (match := _PREEMPTIONS.search(message)) and int(match[1]) > 0:
        return PREEMPTION
    if _V0_PREEMPTED.search(message):
        return PREEMPTION
    if (match := _CONCURRENCY.search(message)) and float(match[2]) < 1:
        return ServerWarning(
            "kv_below_one_request",
            f"The KV cache holds less than one request of {match[1]} tokens ({match[2]}x): long requests queue "
            "behind each other or are preempted.",
        )
    if "User-specified max_model_len" in message and not message.startswith(("ValueError", "Value error")):
        return LONG_MAX_MODEL_LEN
    if message.startswith("The draft model's max_model_len") and "reducing max_model_len" in message:
        return ServerWarning("max_model_len_reduced", message[:500])
    if message.startswith(("Overriding draft model max_position_embeddings", "Overriding draft model max model len")):
        return ServerWarning("draft_context_changed", message[:500])
    if message.startswith("Speculative Decoding is not supported by the V1 Engine. Falling back to V0"):
        return V0_FALLBACK
    lowered = message.lower()
    if any(words in lowered for words in _DEPRECATED):
        return ServerWarning("deprecation", message[:500])
    return None


def graph_limit_warning(
    graph_max_bs: int, max_running: int | None, max_concurrency: int | None = None
) -> ServerWarning | None:
    """None: vLLM's capture bar counts graphs, not their batch sizes, so no `cuda_graph_limit` warning is raised for
    it (its capture sizes are in the engine config's `compilation_config`, unread)."""
    return None
