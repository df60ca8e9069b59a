"""The startup and runtime warnings of a server log worth surfacing on the run and the comparison, each with the
line it came from: the overlap scheduler off, max running requests reset, spec v2 on or off, speculative parameters
adjusted, KV cache retractions, the batch sizes CUDA graphs were captured for, deprecations. Texts per version
follow ../shared/reference/sglang-interface.md §1.3, §1.4, §2.2, §3; every era's wording is recognised.

Pure. A warning's message is the same for every occurrence of its kind and cause, so a run records it once.
"""

from __future__ import annotations

import re

from ..engines.facts import ServerWarning
from .loglines import clean_line, split_prefix

ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GRAPH_BS = re.compile(
    r"^Capture (?:(?:target )?(?:decode|verify) )?cuda graph (?:bs \[([\d, ]+)\]|begin\..*?bs=\[([\d, ]+)\])",
    re.IGNORECASE,
)
_DEPRECATED = re.compile(r"(?:'(?P<flag>--[\w-]+)'|Endpoint '(?P<endpoint>[^']+)'|`(?P<module>[\w.]+)`) is deprecated")


def graph_limit_warning(
    graph_max_bs: int, max_running: int | None, max_concurrency: int | None = None
) -> ServerWarning | None:
    """CUDA graphs that stop below the decode batches this run will make (its benchmark's highest concurrency, at
    most what the server runs at once): those batches run without them. A baseline server may run 2048 requests
    with graphs up to 256 by default; that is only worth saying when the benchmark goes past 256."""
    limits = [n for n in (max_running, max_concurrency) if n]
    if not limits or graph_max_bs >= min(limits):
        return None
    batch = min(limits)
    reach = (
        f"the concurrency {batch} this run benchmarks"
        if max_concurrency and batch == max_concurrency
        else f"the {batch} requests the server runs at once"
    )
    return ServerWarning(
        "cuda_graph_limit",
        f"CUDA graphs were captured for batch sizes up to {graph_max_bs}, below {reach}: larger decode batches run "
        "without them, much slower (--cuda-graph-max-bs raises the limit).",
        graph_max_bs,
    )


def _spec(message: str) -> ServerWarning | None:
    if message.startswith("Overlap scheduler is disabled"):
        return ServerWarning(
            "overlap_disabled",
            "The overlap scheduler is disabled (spec v1): every step waits for the CPU-side scheduling, which costs "
            "throughput; SGLANG_ENABLE_SPEC_V2=True turns it on where the version supports it.",
        )
    if message.startswith(("Spec v2 is enabled", "Beta spec is enabled", "Non-overlap (synchronous) spec v2")):
        return ServerWarning("spec_v2", f"Spec v2 is on: {message.strip()}")
    if message.startswith("Spec v1 is used"):
        return ServerWarning("spec_v2", f"Spec v2 is off: {message.strip()}")
    if message.startswith("SGLANG_ENABLE_SPEC_V2 has been removed"):
        return ServerWarning("spec_v2", "SGLANG_ENABLE_SPEC_V2 is ignored by this version: spec v2 is always on.")
    if message.startswith("Max running requests is reset to"):
        limit = message.split("reset to", 1)[1].split()[0]
        return ServerWarning(
            "max_running_reset",
            f"Max running requests was reset to {limit} for speculative decoding: concurrency above {limit} queues.",
        )
    if message.startswith("speculative_num_draft_tokens is adjusted"):
        return ServerWarning("spec_params_adjusted", message.strip())
    if message.startswith("Mixed chunked prefill is disabled"):
        return ServerWarning("mixed_chunk_disabled", message.strip())
    return None


def find_warning(line: str) -> ServerWarning | None:
    """The warning one log line carries, or None."""
    text = ANSI.sub("", clean_line(line))
    if not text:
        return None
    _, _, message = split_prefix(text)
    # Before 0.5.12 these are printed bare (no prefix) and may follow a level name.
    message = message.removeprefix("WARNING:").removeprefix("WARNING ").strip()
    found = _spec(message)
    if found is not None:
        return found
    if message.startswith("KV cache pool is full. Retract requests."):
        return ServerWarning(
            "kv_retraction",
            "The KV cache pool ran out and requests were retracted (recomputed later): throughput and latency "
            "include the retries.",
        )
    graph = _GRAPH_BS.search(message)
    if graph is not None:
        sizes = [int(b) for b in (graph.group(1) or graph.group(2)).replace(" ", "").split(",") if b]
        if sizes:
            # Judged against the server's max running requests by the caller (graph_limit_warning).
            return ServerWarning("cuda_graph_limit", "", max(sizes))
    deprecated = _DEPRECATED.search(message)
    if deprecated is not None or "DeprecationWarning" in message or "FutureWarning" in message:
        return ServerWarning("deprecation", message.strip()[:500])
    return None
