"""Structured facts read from a run's log lines: pure, so the orchestrator only stores and broadcasts them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import sglang

KEEP_POINTS = 300  # per series: enough for a live chart, small enough to store on the run row


@dataclass
class FactBatch:
    """What one batch of lines taught us."""

    decode: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, list[list[float]]] = field(default_factory=dict)
    progress: int | None = None
    milestones: set[str] = field(default_factory=set)
    failure: sglang.FailureSignal | None = None
    server_args: dict[str, Any] | None = None

    @property
    def has_series(self) -> bool:
        return bool(self.decode or self.metrics)


class LogFacts:
    """Turns numbered log lines into facts; custom metrics come from the config's named-group regexes."""

    def __init__(self, log_metrics: Mapping[str, str]) -> None:
        self.metric_patterns = {name: re.compile(pattern) for name, pattern in log_metrics.items()}

    def read(self, first_line: int, lines: Iterable[str]) -> FactBatch:
        batch = FactBatch()
        for n, line in enumerate(lines, start=first_line):
            for name, pattern in self.metric_patterns.items():
                match = pattern.search(line)
                if match:
                    try:
                        batch.metrics.setdefault(name, []).append([n, float(match.group(name))])
                    except (ValueError, IndexError):
                        pass  # a match without a number in the group is not a measurement
            fact = sglang.parse_line(line)
            if fact is None:
                continue
            if isinstance(fact, sglang.ShardProgress):
                batch.progress = fact.percent
            elif isinstance(fact, sglang.DecodeStats):
                timestamp, _, _ = sglang.split_prefix(line)
                batch.decode.append(
                    {
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
                )
            elif isinstance(fact, sglang.Milestone):
                batch.milestones.add(fact.name)
            elif isinstance(fact, sglang.FailureSignal) and batch.failure is None:
                batch.failure = fact
            elif isinstance(fact, sglang.ServerArgsDump):
                batch.server_args = fact.args
        return batch


def merge_series(stored: Mapping[str, Any], batch: FactBatch) -> dict[str, Any]:
    """The run's stored live facts with a batch's new points appended, trimmed to the last KEEP_POINTS."""
    decode = [*stored.get("decode", []), *batch.decode][-KEEP_POINTS:]
    metrics = {name: list(points) for name, points in stored.get("metrics", {}).items()}
    for name, points in batch.metrics.items():
        metrics[name] = [*metrics.get(name, []), *points][-KEEP_POINTS:]
    return {"decode": decode, "metrics": metrics}
