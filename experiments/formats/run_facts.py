"""What a run's stored live facts say about its server, shaped for the run page. Pure.

The worker's log reader stores them under `live_facts["server"]` (workers/sglang/live_facts.py): the draft's own
loading bar, the CUDA-graph capture bar and each capture's time, the KV pool's sizes, retractions. The page and its
live updates show the same words (`shown`), so a reload and a live page never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def server_facts(live_facts: Mapping[str, Any], target_progress: int | None) -> dict[str, Any]:
    """Each model's loading, CUDA-graph capture, the KV pool's size and retractions; `shown`: each as the page words
    it. `target_progress`: the run's loading progress (the target's shards)."""
    server = live_facts.get("server") or {}
    limits = server.get("limits") or {}
    # Every TP rank logs each capture's end: the longest per model is how long that model's capture took.
    capture_s: dict[str, float] = {}
    for which, elapsed in server.get("graphs_captured") or []:
        if isinstance(elapsed, int | float):
            capture_s[str(which)] = max(capture_s.get(str(which), 0.0), float(elapsed))
    facts: dict[str, Any] = {
        "target_progress": target_progress,
        "draft_progress": server.get("draft_loading_progress"),
        "capture_progress": server.get("capture_progress"),
        "capture_s": capture_s,
        "max_total_num_tokens": limits.get("max_total_num_tokens"),
        "max_running_requests": limits.get("max_running_requests"),
        "context_len": limits.get("context_len"),
        "retractions": server.get("retractions", 0),
        "last_retraction": server.get("last_retraction", ""),
    }
    capturing = facts["capture_progress"]
    captured = " · ".join(f"{which} {seconds:.1f} s" for which, seconds in capture_s.items())
    if capturing is not None and capturing < 100:
        captured = " · ".join(filter(None, [captured, f"capturing {capturing}%"]))
    facts["shown"] = {
        "target_progress": _shown(target_progress, "{}%"),
        "draft_progress": _shown(facts["draft_progress"], "{}%"),
        "capture": captured or "—",
        "max_total_num_tokens": _shown(facts["max_total_num_tokens"], "{:,} tokens"),
        "max_running_requests": _shown(facts["max_running_requests"], "{}"),
        "context_len": _shown(facts["context_len"], "{:,} tokens"),
        "retractions": str(facts["retractions"]),
    }
    return facts


def _shown(value: Any, form: str) -> str:
    return "—" if value is None else form.format(value)
