"""The live facts a run's page shows, read from batches of its log lines: progress, milestones, Decode-batch series,
the config's custom metrics (user regexes, run within time budgets by `experiments.log_metrics`). Pure, so the server
log only stores and broadcasts them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from experiments.log_metrics import MetricReader

from . import loglines
from .facts import DecodeStats, FailureSignal, Milestone, ServerArgsDump, ShardProgress

KEEP_POINTS = 300  # per series: enough for a live chart, small enough to store on the run row
DECODE_MARKER = "Decode batch"  # all SGLang eras: "Decode batch." / "Decode batch," / "Decode batch [N],"


@dataclass
class FactBatch:
    """What one batch of lines taught us."""

    decode: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, list[list[float]]] = field(default_factory=dict)
    progress: int | None = None
    milestones: set[str] = field(default_factory=set)
    failure: FailureSignal | None = None
    server_args: dict[str, Any] | None = None
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (kind, message) for the run, new in this batch

    @property
    def has_series(self) -> bool:
        return bool(self.decode or self.metrics)


class LogFacts:
    """Turns numbered log lines into facts; custom metrics come from the config's named-group regexes."""

    def __init__(self, log_metrics: Mapping[str, str], *, disabled_metrics: Iterable[str] = ()) -> None:
        self.metrics = MetricReader(log_metrics, disabled=disabled_metrics)

    def read(self, first_line: int, lines: Sequence[str]) -> FactBatch:
        metrics = self.metrics.read(first_line, lines)
        batch = FactBatch(metrics=metrics.points, warnings=metrics.warnings)
        decode_lines: list[int] = []
        for i, line in enumerate(lines):
            if DECODE_MARKER in line:
                # A flood is mostly Decode lines and only the last few are kept: parse those alone, below.
                decode_lines.append(i)
                continue
            fact = loglines.parse_line(line)
            if fact is None:
                continue
            if isinstance(fact, ShardProgress):
                batch.progress = fact.percent
            elif isinstance(fact, Milestone):
                batch.milestones.add(fact.name)
            elif isinstance(fact, FailureSignal) and batch.failure is None:
                batch.failure = fact
            elif isinstance(fact, ServerArgsDump):
                batch.server_args = fact.args
        for i in decode_lines[-KEEP_POINTS:]:
            point = _decode_point(first_line + i, lines[i])
            if point is not None:
                batch.decode.append(point)
        for name, points in batch.metrics.items():
            batch.metrics[name] = points[-KEEP_POINTS:]
        return batch


def _decode_point(n: int, line: str) -> dict[str, Any] | None:
    fact = loglines.parse_line(line)
    if not isinstance(fact, DecodeStats):
        return None
    timestamp, _, _ = loglines.split_prefix(line)
    return {
        "n": n,
        "ts": timestamp,
        "running_req": fact.running_req,
        "tokens": fact.tokens,
        "token_usage": fact.token_usage,
        "accept_len": fact.accept_len,
        "accept_rate": fact.accept_rate,
        "gen_throughput": fact.gen_throughput,
        "queue_req": fact.queue_req,
        "cuda_graph": fact.cuda_graph,
    }


def merge_series(stored: Mapping[str, Any], batch: FactBatch) -> dict[str, Any]:
    """The run's stored live facts with a batch's new points appended, trimmed to the last KEEP_POINTS."""
    decode = [*stored.get("decode", []), *batch.decode][-KEEP_POINTS:]
    metrics = {name: list(points) for name, points in stored.get("metrics", {}).items()}
    for name, points in batch.metrics.items():
        metrics[name] = [*metrics.get(name, []), *points][-KEEP_POINTS:]
    return {"decode": decode, "metrics": metrics}


def decode_summary(first_line: int, lines: Sequence[str]) -> dict[str, Any]:
    """What the server's own Decode-batch lines say about a stretch of its log (a benchmark cell's window)."""
    points = [p for i, line in enumerate(lines) if DECODE_MARKER in line and (p := _decode_point(first_line + i, line))]
    if not points:
        return {"lines": 0}
    accept = [p["accept_len"] for p in points if p["accept_len"] is not None]
    return {
        "lines": len(points),
        "first_line": points[0]["n"],
        "last_line": points[-1]["n"],
        "mean_gen_throughput": round(sum(p["gen_throughput"] for p in points) / len(points), 3),
        "mean_accept_len": round(sum(accept) / len(accept), 4) if accept else None,
        "max_running_req": max(p["running_req"] for p in points),
    }
