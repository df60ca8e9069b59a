"""What one AIPerf export holds once read (`Part`), and which export a file's text is (`kind_of`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ... import bounded_json

TOOL = "aiperf"
SUMMARY, RECORDS, CSV, SERVER_METRICS = "summary", "records", "csv", "server metrics"
# What each kind is called in a message, by the name AIPerf gives its file.
NAMES = {
    SUMMARY: "an AIPerf summary (profile_export_aiperf.json)",
    RECORDS: "an AIPerf per-request export (profile_export.jsonl)",
    CSV: "an AIPerf summary CSV (profile_export_aiperf.csv)",
    SERVER_METRICS: "an AIPerf server-metrics export (server_metrics_export.json)",
}
STATS = {"avg": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
# AIPerf's metric -> specdash's latency, each with its stats; std and p95 are kept raw.
LATENCIES = {
    "time_to_first_token": "ttft",
    "inter_token_latency": "tpot",  # (latency - TTFT) / (output tokens - 1): specdash's TPOT
    "inter_chunk_latency": "itl",  # the gap between two chunks: specdash's ITL
    "request_latency": "e2e_latency",
}
TO_MS = {"ms": 1.0, "sec": 1000.0, "s": 1000.0, "us": 0.001, "ns": 1e-6}


@dataclass
class Part:
    """What one AIPerf file holds: the cell's metrics by Measurement's names, what has no column (raw), and the
    run's facts it states (model, concurrency, request shape, version, benchmark id)."""

    kind: str
    name: str
    metrics: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


def kind_of(content: str) -> str | None:
    """Which AIPerf export a file's text is (SUMMARY, RECORDS, CSV, SERVER_METRICS), or None for any other text."""
    text = content.lstrip()
    if text.startswith("Metric,avg,"):
        return CSV
    try:
        whole = bounded_json.loads(text, allow_nan=True)
    except ValueError:
        first = text.split("\n", 1)[0]
        try:
            whole = bounded_json.loads(first, allow_nan=True)
        except ValueError:
            return None
        return RECORDS if is_record(whole) else None
    if not isinstance(whole, dict):
        return None
    if isinstance(whole.get("summary"), dict) and isinstance(whole.get("metrics"), dict) and "input_config" in whole:
        return SERVER_METRICS
    if isinstance(whole.get("input_config"), dict) and any(is_metric(v) for v in whole.values()):
        return SUMMARY
    return RECORDS if is_record(whole) else None


def is_record(row: Any) -> bool:
    return (
        isinstance(row, dict)
        and isinstance(row.get("metadata"), dict)
        and isinstance(row.get("metrics"), dict)
        and "request_start_ns" in row["metadata"]
    )


def is_metric(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("unit"), str) and "avg" in value
