"""The live facts a run's page shows, read from batches of its log lines: progress, milestones, the series of the
engine's periodic step lines (SGLang's Decode batch, vLLM's stats and SpecDecoding lines), the config's custom
metrics (user regexes, run within time budgets by `experiments.rules.log_metrics`). Pure, so the server log only
stores and broadcasts them. What a line means is the engine's `LogGrammar`; what is done with it is the same for
every engine."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from experiments.rules.log_metrics import MetricReader

from .facts import (
    CaptureProgress,
    DecodeStats,
    FailureSignal,
    GraphCaptured,
    LogFact,
    Milestone,
    Retraction,
    ServerArgsDump,
    ServerLimits,
    ServerWarning,
    ShardProgress,
    WeightsLoaded,
)

KEEP_POINTS = 300  # per series: enough for a live chart, small enough to store on the run row
# A crash's traceback storm repeats the same lines by the thousand, each read for a warning and a fact by a dozen
# regexes (~11 µs a line: 108 ms a 10,000-line batch): each distinct line up to this long is read once.
READ_LINES_CACHED = 4096
CACHED_LINE_CHARS = 500


class LogGrammar(Protocol):
    """How one engine's log reads, line by line (pure; every method is total: any text in, None for nothing)."""

    # A substring of every periodic step line (the decode series' points); a flood is mostly those lines, so only
    # the last few of a batch are parsed.
    step_marker: str
    # A substring of the lines that say the server was idle before a step (SGLang's Prefill batch), or None.
    prefill_marker: str | None

    def parse_line(self, line: str) -> LogFact | None: ...

    def parse_step_line(self, line: str) -> tuple[str | None, DecodeStats] | None:
        """A step line's timestamp and figures, or None."""

    def prefill_was_idle(self, line: str) -> bool:
        """A prefill-marker line logged with nothing running (the step line after it averages idle time)."""

    def find_warning(self, line: str) -> ServerWarning | None: ...

    def graph_limit_warning(
        self, graph_max_bs: int, max_running: int | None, max_concurrency: int | None
    ) -> ServerWarning | None: ...

    def clean_line(self, line: str) -> str: ...


def summary_markers(grammar: LogGrammar) -> tuple[str, ...]:
    """The lines `decode_summary` reads: all a cell's summary needs of its stretch of the log."""
    return (grammar.step_marker, *([grammar.prefill_marker] if grammar.prefill_marker else []))


@dataclass
class FactBatch:
    """What one batch of lines taught us."""

    decode: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, list[list[float]]] = field(default_factory=dict)
    progress: int | None = None
    milestones: set[str] = field(default_factory=set)
    failure: FailureSignal | None = None
    server_args: dict[str, Any] | None = None
    draft_progress: int | None = None  # the draft model's own shard bar, after the target's
    server_facts: dict[str, Any] = field(default_factory=dict)  # limits, capture progress and times, retractions
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (kind, message) for the run, new in this batch
    # What the server warned about, new in this batch: (warning, its line number, the line).
    server_warnings: list[tuple[ServerWarning, int, str]] = field(default_factory=list)

    @property
    def has_series(self) -> bool:
        return bool(self.decode or self.metrics or self.server_facts or self.draft_progress is not None)


class LogFacts:
    """Turns numbered log lines into facts; custom metrics come from the config's named-group regexes."""

    def __init__(
        self,
        grammar: LogGrammar,
        log_metrics: Mapping[str, str],
        *,
        disabled_metrics: Iterable[str] = (),
        target_progress: int | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        self.grammar = grammar
        self.metrics = MetricReader(log_metrics, disabled=disabled_metrics)
        # Loading shows two bars when a draft model has its own shards: the target's, then the draft's. The
        # target's is done once a rank logs "Load weight end" (or it was at 100 before a re-attach); a bar that
        # then restarts at 0 or counts other shards is the draft's. Each only grows: TP ranks interleave bars.
        self.target_loaded = target_progress == 100
        self.target_total: int | None = None
        self.target_max = target_progress or 0
        self.draft_max: int | None = None
        self.max_running: int | None = None
        self.max_concurrency = max_concurrency  # the benchmark's highest: what the CUDA-graph limit is judged by
        self.graph_capture: tuple[int, int, str] | None = None  # (largest batch size, line number, line)
        self.warned: set[tuple[str, str]] = set()
        # The Decode lines and metric points of batches read without their series (`read(..., series=False)`): the
        # last KEEP_POINTS of each, read into the series of the next batch that asks for it.
        self._unread_decode: deque[tuple[int, str]] = deque(maxlen=KEEP_POINTS)
        self._unread_metrics: dict[str, deque[list[float]]] = {}
        # Per rank, the weights each model took as it loaded (GiB), in loading order: the target's, then the drafter's.
        self.weights_by_rank: dict[int | None, list[float]] = {}

    def read(self, first_line: int, lines: Sequence[str], *, series: bool = True) -> FactBatch:
        """The batch's facts. Its series (Decode points, metric points: the live chart's) are read too, with those
        of the batches before it read without theirs, unless `series` is False: a flood's batches, read faster than
        a chart is redrawn, leave theirs to a later batch, which keeps the last KEEP_POINTS of each, as the chart."""
        metrics = self.metrics.read(first_line, lines)
        batch = FactBatch(warnings=metrics.warnings)
        decode_lines: list[int] = []
        grammar = self.grammar
        step_marker = grammar.step_marker
        read_lines = _READ_LINES.setdefault(id(type(grammar)), {})
        for i, line in enumerate(lines):
            if step_marker in line:
                # A flood is mostly Decode lines and only the last few are kept: parse those alone, below.
                decode_lines.append(i)
                continue
            found = read_lines.get(line)
            if found is None:
                found = grammar.find_warning(line), grammar.parse_line(line)
                if len(line) <= CACHED_LINE_CHARS:
                    if len(read_lines) >= READ_LINES_CACHED:
                        read_lines.clear()  # most lines of a log are seen once (timestamps): start again
                    read_lines[line] = found
            warning, fact = found
            if warning is not None or self.graph_capture is not None:
                self._read_warning(first_line + i, line, warning, batch)
            if fact is None:
                continue
            if isinstance(fact, ShardProgress):
                self._read_shards(fact, batch)
            elif isinstance(fact, Milestone):
                batch.milestones.add(fact.name)
                self.target_loaded |= fact.name == "weights_loaded"
            elif isinstance(fact, WeightsLoaded):
                batch.milestones.add("weights_loaded")
                self.target_loaded = True
                batch.server_facts["weights_gib"] = self._read_weights(fact)
            elif isinstance(fact, ServerLimits):
                batch.server_facts["limits"] = dataclasses.asdict(fact)
                self.max_running = fact.max_running_requests
            elif isinstance(fact, CaptureProgress):
                batch.server_facts["capture_progress"] = fact.percent
            elif isinstance(fact, GraphCaptured):
                batch.server_facts.setdefault("graphs_captured", []).append([fact.which, fact.elapsed_s])
            elif isinstance(fact, Retraction):
                batch.server_facts["retractions"] = batch.server_facts.get("retractions", 0) + 1
                batch.server_facts["last_retraction"] = fact.message
            elif isinstance(fact, FailureSignal) and batch.failure is None:
                batch.failure = fact
            elif isinstance(fact, ServerArgsDump):
                batch.server_args = fact.args
        self._unread_decode.extend((first_line + i, lines[i]) for i in decode_lines[-KEEP_POINTS:])
        for name, points in metrics.points.items():
            self._unread_metrics.setdefault(name, deque(maxlen=KEEP_POINTS)).extend(points)
        if series:
            self._read_series(batch)
        return batch

    def _read_weights(self, fact: WeightsLoaded) -> dict[str, float]:
        """The GPU memory each model's weights took, the most any rank reported: {"target", "draft"} where the engine
        logs each model's own line (SGLang), {"all"} where one line counts them together (vLLM)."""
        if fact.models == "all":
            self.weights_by_rank[fact.rank] = [fact.gib]
            return {"all": max(values[0] for values in self.weights_by_rank.values())}
        self.weights_by_rank.setdefault(fact.rank, []).append(fact.gib)
        out = {}
        for index, which in enumerate(("target", "draft")):
            taken = [values[index] for values in self.weights_by_rank.values() if len(values) > index]
            if taken:
                out[which] = max(taken)
        return out

    def _read_series(self, batch: FactBatch) -> None:
        for n, line in self._unread_decode:
            point = _decode_point(self.grammar, n, line)
            if point is not None:
                batch.decode.append(point)
        self._unread_decode.clear()
        batch.metrics = {name: list(points) for name, points in self._unread_metrics.items() if points}
        self._unread_metrics.clear()

    def _read_warning(self, n: int, line: str, found: ServerWarning | None, batch: FactBatch) -> None:
        if found is not None and found.kind == "cuda_graph_limit" and found.value is not None:
            self.graph_capture = (found.value, n, line)
        elif found is not None:
            self._add_warning(found, n, line, batch)
        if self.graph_capture is not None and self.max_running is not None:
            # Both known (the limits line comes first in every era): judge the capture's limit once.
            graph_max, graph_n, graph_line = self.graph_capture
            self.graph_capture = None
            limit = self.grammar.graph_limit_warning(graph_max, self.max_running, self.max_concurrency)
            if limit is not None:
                self._add_warning(limit, graph_n, graph_line, batch)

    def _add_warning(self, warning: ServerWarning, n: int, line: str, batch: FactBatch) -> None:
        if (warning.kind, warning.message) not in self.warned:
            self.warned.add((warning.kind, warning.message))
            batch.server_warnings.append((warning, n, self.grammar.clean_line(line)[:1000]))

    def _read_shards(self, fact: ShardProgress, batch: FactBatch) -> None:
        if self.draft_max is None and self.target_loaded and (fact.done == 0 or fact.total != self.target_total):
            self.draft_max = 0
        if self.draft_max is not None:
            self.draft_max = batch.draft_progress = max(self.draft_max, fact.percent)
            return
        self.target_total = fact.total
        self.target_max = batch.progress = max(self.target_max, fact.percent)


# The warning and the fact each of the distinct lines up to CACHED_LINE_CHARS long read lately carries, at most
# READ_LINES_CACHED a grammar (a storm repeats the same few hundred; a dict's lookup is half an LRU cache's, and the
# answers, immutable, never change).
_READ_LINES: dict[int, dict[str, tuple[ServerWarning | None, LogFact | None]]] = {}


def _decode_point(grammar: LogGrammar, n: int, line: str) -> dict[str, Any] | None:
    parsed = grammar.parse_step_line(line)
    if parsed is None:
        return None
    timestamp, fact = parsed
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
    merged: dict[str, Any] = {"decode": decode, "metrics": metrics}
    server = dict(stored.get("server", {}))
    for key, value in batch.server_facts.items():
        if key == "graphs_captured":
            server[key] = [*server.get(key, []), *value]
        elif key == "retractions":
            server[key] = server.get(key, 0) + value
        else:
            server[key] = value
    if batch.draft_progress is not None:
        server["draft_loading_progress"] = batch.draft_progress
    if server:
        merged["server"] = server
    return merged


def decode_summary(grammar: LogGrammar, first_line: int, lines: Sequence[str]) -> dict[str, Any]:
    """What the server's own step lines say about a stretch of its log (a benchmark cell's window).

    A step line's generation throughput is the tokens since the previous one over the wall time since it (SGLang
    reference §3.4; vLLM's stats interval likewise), so a line whose interval held idle time says little about
    decoding: the first one after warm-up reads 0.4 tok/s. Such lines are left out of the means ("idle_lines"): a
    line with no running request, and the first line after a Prefill batch that found nothing running (the server
    was idle before that prefill). If every line is idle, the means use them all rather than say nothing.
    """
    points: list[dict[str, Any]] = []
    idle: list[bool] = []
    idle_before_next = False
    prefill_marker = grammar.prefill_marker
    for i, line in enumerate(lines):
        if prefill_marker is not None and prefill_marker in line:
            idle_before_next |= grammar.prefill_was_idle(line)
            continue
        if grammar.step_marker not in line or (point := _decode_point(grammar, first_line + i, line)) is None:
            continue
        points.append(point)
        idle.append(idle_before_next or point["running_req"] == 0)
        idle_before_next = False
    if not points:
        return {"lines": 0}
    busy = [p for p, was_idle in zip(points, idle, strict=True) if not was_idle] or points
    accept = [p["accept_len"] for p in busy if p["accept_len"] is not None]
    return {
        "lines": len(points),
        "idle_lines": sum(idle),
        "first_line": points[0]["n"],
        "last_line": points[-1]["n"],
        "mean_gen_throughput": round(sum(p["gen_throughput"] for p in busy) / len(busy), 3),
        "mean_accept_len": round(sum(accept) / len(accept), 4) if accept else None,
        "max_running_req": max(p["running_req"] for p in points),
    }
