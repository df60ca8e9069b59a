"""AIPerf's server-metrics export (server_metrics_export.json), read into a `Part`: server_metrics/json_exporter.py
and common/models/server_metrics_models.py (ServerMetricsExportData) of AIPerf 0.13."""

from __future__ import annotations

import math
from typing import Any

from ..common import Checker, text_of
from .part import SERVER_METRICS, Part
from .summary import config_facts

# The server's counters (AIPerf drops the `_total` suffix; both spellings read) and what each gives.
SGLANG_TOKENS, SGLANG_VERIFY = "sglang:generation_tokens", "sglang:spec_verify_calls"
VLLM_ACCEPTED, VLLM_DRAFTS = "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_drafts"
GAUGE = "sglang:spec_accept_length"
E2E_HISTOGRAMS = ("sglang:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds")


def read_server_metrics(name: str, row: dict[str, Any], errors: list[str]) -> Part | None:
    """The server's own counts over the profiling phase: the pooled accept length from its counters (SGLang's
    generation tokens / verify calls, vLLM's 1 + accepted / drafts), the gauge's mean kept raw as AIPerf shows it,
    the server's mean end-to-end latency from its histogram, and the speculative settings its gauges show."""
    check = Checker(1, errors)
    part = Part(SERVER_METRICS, name)
    metrics = row["metrics"]
    totals = {key: _counter(metrics, key, check) for key in (SGLANG_TOKENS, SGLANG_VERIFY, VLLM_ACCEPTED, VLLM_DRAFTS)}
    verify, drafts = totals[SGLANG_VERIFY], totals[VLLM_DRAFTS]
    if verify:
        part.metrics["pooled_accept_length"] = (totals[SGLANG_TOKENS] or 0) / verify
        part.facts["speculates"] = f"metrics.{SGLANG_VERIFY}"
    elif drafts:
        part.metrics["pooled_accept_length"] = 1 + (totals[VLLM_ACCEPTED] or 0) / drafts
        part.facts["speculates"] = f"metrics.{VLLM_DRAFTS}"
    gauge = _gauge_mean(metrics, GAUGE, check)
    if gauge is not None:
        part.raw["sglang_spec_accept_length_gauge_mean"] = gauge  # AIPerf's "Accept Length"
    for key in E2E_HISTOGRAMS:
        count, total = _histogram(metrics, key, check)
        if count:
            part.metrics["server_mean_e2e_latency_ms"] = total / count * 1000.0
    for key, spec_field in (("sglang:spec_num_steps", "speculative_num_steps"),
                            ("sglang:spec_num_draft_tokens", "speculative_num_draft_tokens")):  # fmt: skip
        value = _gauge_mean(metrics, key, check)
        if value is not None and value == int(value) and value >= 1 and part.facts.get("speculates"):
            part.facts.setdefault("spec", {})[spec_field] = int(value)
    engines = {key.split(":", 1)[0] for key in metrics if isinstance(key, str) and ":" in key}
    if len(engines & {"sglang", "vllm"}) == 1:
        part.facts["engine"] = (engines & {"sglang", "vllm"}).pop()
    config = row.get("input_config")
    part.facts.update(config_facts(config, check))
    part.facts["benchmark_id"] = row.get("benchmark_id") if isinstance(row.get("benchmark_id"), str) else None
    part.facts["version"] = text_of(row.get("aiperf_version"))
    return part if not check.errors else None


def _series(metrics: dict[str, Any], key: str, check: Checker) -> list[dict[str, Any]]:
    metric = metrics.get(key, metrics.get(f"{key}_total"))
    if metric is None:
        return []
    series = metric.get("series") if isinstance(metric, dict) else None
    if not isinstance(series, list) or not all(
        isinstance(s, dict) and isinstance(s.get("stats"), dict | None) for s in series
    ):
        check.fail(f"metrics.{key}", "not {type, series: [{stats}]}")
        return []
    return [s for s in series if isinstance(s.get("stats"), dict)]


def _counter(metrics: dict[str, Any], key: str, check: Checker) -> float | None:
    """A counter's increase over the profiling phase, summed over its label sets and endpoints."""
    values = [
        check.number(s["stats"], "total", prefix=f"metrics.{key}.series.stats.") for s in _series(metrics, key, check)
    ]
    return math.fsum(v for v in values if v is not None) if values else None


def _gauge_mean(metrics: dict[str, Any], key: str, check: Checker) -> float | None:
    values = [check.number(s["stats"], "avg", prefix=f"metrics.{key}.series.stats.", optional=True)
              for s in _series(metrics, key, check)]  # fmt: skip
    present = [v for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None


def _histogram(metrics: dict[str, Any], key: str, check: Checker) -> tuple[float, float]:
    count = total = 0.0
    for s in _series(metrics, key, check):
        count += check.number(s["stats"], "count", prefix=f"metrics.{key}.series.stats.", optional=True) or 0
        total += check.number(s["stats"], "sum", prefix=f"metrics.{key}.series.stats.", optional=True) or 0
    return count, total
