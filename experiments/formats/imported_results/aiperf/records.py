"""AIPerf's per-request export (profile_export.jsonl), read into a `Part`: common/models/record_models.py
(MetricRecordInfo) of AIPerf 0.13; the warm-up's records are dropped and counted."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from experiments.analysis import slo

from ... import bounded_json
from ..common import MAX_ERRORS, MAX_LINES, Checker
from .part import LATENCIES, RECORDS, STATS, TO_MS, Part, is_record


def read_records(name: str, text: str, errors: list[str]) -> Part | None:
    """The profiling phase's requests, the warm-up's dropped (counted raw): completed and failed, the duration from
    the first request's start to the last one's end (AIPerf's benchmark_duration), the token throughputs over it,
    the latency statistics, and the requests' rows."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if len(lines) > slo.MAX_REQUESTS or len(lines) > MAX_LINES * 10:
        errors.append(f"at most {slo.MAX_REQUESTS} request records are accepted (the file has {len(lines)})")
        return None
    before = len(errors)
    warmup = 0
    starts: list[float] = []
    ends: list[float] = []
    rows: list[dict[str, Any]] = []
    samples: dict[str, list[float]] = {metric: [] for metric in LATENCIES.values()}
    tokens = {"output": 0.0, "input": 0.0}
    spec = _Acceptance()
    for n, line in lines:
        check = Checker(n, errors)
        try:
            record = bounded_json.loads(line, allow_nan=True)
        except ValueError as exc:
            check.fail("", f"not JSON ({str(exc)[:80]})")
            continue
        if not is_record(record):
            check.fail("", "not an AIPerf request record ({metadata: {request_start_ns, ...}, metrics})")
            continue
        meta, metrics = record["metadata"], record["metrics"]
        if meta.get("benchmark_phase") == "warmup":
            warmup += 1
            continue
        start = check.number(meta, "request_start_ns", prefix="metadata.")
        end = check.number(meta, "request_end_ns", prefix="metadata.")
        if start is not None and end is not None:
            starts.append(start)
            ends.append(end)
        row = _request_row(record, metrics, check, samples, tokens, spec)
        if row is not None:
            rows.append(row)
        if len(errors) - before >= MAX_ERRORS:
            break
    if len(errors) > before:
        return None
    if not rows:
        errors.append(f"no request of the profiling phase (the file holds {warmup} warm-up records)")
        return None
    duration = (max(ends) - min(starts)) / 1e9
    if duration <= 0:
        errors.append("metadata.request_end_ns: the requests end before they start")
        return None
    completed = sum(1 for r in rows if r["ok"])
    part = Part(RECORDS, name)
    part.metrics.update(
        duration_s=duration,
        completed=completed,
        failed=len(rows) - completed,
        output_throughput=tokens["output"] / duration,
        input_throughput=tokens["input"] / duration,
        total_throughput=(tokens["output"] + tokens["input"]) / duration,
        request_throughput=completed / duration,
        accept_length=1 + spec.accepted / spec.steps if spec.steps else None,
        mean_request_accept_length=math.fsum(spec.lengths) / len(spec.lengths) if spec.lengths else None,
    )
    for metric, values in samples.items():
        for stat, value in _statistics(values).items():
            part.metrics[f"{stat}_{metric}_ms"] = value
    part.metrics["requests"], problems = slo.checked_requests(rows)
    if problems:
        errors.append(f"request rows: {problems[0]}")
        return None
    part.raw["warmup_requests_dropped"] = warmup
    part.facts.update(
        num_prompts=len(rows),
        output_len=round(tokens["output"] / completed) if completed else None,
        input_len=round(tokens["input"] / completed) if completed else None,
    )
    return part


@dataclass
class _Acceptance:
    """vLLM's per-request acceptance over the requests: verify steps, accepted drafts, each request's own length."""

    steps: float = 0.0
    accepted: float = 0.0
    lengths: list[float] = field(default_factory=list)


def _request_row(
    record: dict[str, Any],
    metrics: dict[str, Any],
    check: Checker,
    samples: dict[str, list[float]],
    tokens: dict[str, float],
    spec: _Acceptance,
) -> dict[str, Any] | None:
    """One profiling request's row ({ok, output_len, <latency>_ms}), its latencies added to the cell's samples."""
    before = len(check.errors)
    if record.get("error") is not None:
        output = _record_value(metrics, "output_sequence_length", check, optional=True)
        return {"ok": False, "output_len": int(output or 0), **{f"{m}_ms": None for m in slo.METRICS}}
    output = _record_value(metrics, "output_sequence_length", check)
    isl = _record_value(metrics, "input_sequence_length", check, optional=True)
    row: dict[str, Any] = {"ok": True, "output_len": int(output or 0)}
    for key, metric in LATENCIES.items():
        if key == "inter_chunk_latency":
            gaps = _record_gaps(metrics, check)
            samples[metric].extend(gaps or [])
            row["itl_ms"] = math.fsum(gaps) / len(gaps) if gaps else None
            continue
        value = _record_value(metrics, key, check, optional=key == "inter_token_latency", time=True)
        row[f"{metric}_ms"] = value
        if value is not None:
            samples[metric].append(value)
    steps = _record_value(metrics, "spec_decode_steps", check, optional=True)
    accepted = _record_value(metrics, "spec_decode_accepted_draft_tokens", check, optional=True)
    length = _record_value(metrics, "spec_decode_acceptance_length", check, optional=True)
    if steps and accepted is not None:
        spec.steps += steps
        spec.accepted += accepted
    if length is not None:
        spec.lengths.append(length)
    if len(check.errors) > before:
        return None
    tokens["output"] += output or 0
    tokens["input"] += isl or 0
    return row


def _record_value(
    metrics: dict[str, Any], key: str, check: Checker, *, optional: bool = False, time: bool = False
) -> float | None:
    metric = metrics.get(key)
    if metric is None:
        if not optional:
            check.fail(f"metrics.{key}", "missing")
        return None
    if not isinstance(metric, dict):
        check.fail(f"metrics.{key}", "not {value, unit}")
        return None
    value = check.number(metric, "value", prefix=f"metrics.{key}.")
    if value is None or not time:
        return value
    factor = TO_MS.get(str(metric.get("unit")))
    if factor is None:
        check.fail(f"metrics.{key}.unit", f"not a unit of time ({', '.join(TO_MS)})")
        return None
    return value * factor


def _record_gaps(metrics: dict[str, Any], check: Checker) -> list[float] | None:
    metric = metrics.get("inter_chunk_latency")
    if metric is None:
        return None  # one chunk, or a request that was not streamed
    values = metric.get("value") if isinstance(metric, dict) else None
    factor = TO_MS.get(str(metric.get("unit"))) if isinstance(metric, dict) else None
    if (
        not isinstance(values, list)
        or factor is None
        or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in values
        )
    ):
        check.fail("metrics.inter_chunk_latency", "not {value: [gaps], unit} in a unit of time")
        return None
    return [v * factor for v in values]


def _gap(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _statistics(values: list[float]) -> dict[str, float | None]:
    """Mean, median, p90 and p99 of `values`, percentiles interpolated linearly between ranks (AIPerf's numpy's)."""
    if not values:
        return dict.fromkeys(STATS.values())
    ordered = sorted(values)

    def rank(q: float) -> float:
        position = (len(ordered) - 1) * q
        low = math.floor(position)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return {"mean": math.fsum(ordered) / len(ordered), "median": rank(0.5), "p90": rank(0.9), "p99": rank(0.99)}
