"""The facts a server log carries, as values (what `loglines` and `failures` return)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ShardProgress:
    percent: int
    done: int
    total: int


@dataclass(frozen=True)
class DecodeStats:
    running_req: int
    tokens: int
    token_usage: float
    accept_len: float | None
    accept_rate: float | None
    cuda_graph: bool | None
    gen_throughput: float
    queue_req: int


@dataclass(frozen=True)
class PrefillStats:
    new_seq: int
    new_token: int
    cached_token: int
    running_req: int
    queue_req: int


MILESTONES = (
    "server_args",
    "weights_loading",
    "weights_loaded",
    "graph_capture",
    "kv_allocated",
    "http_started",
    "ready",
    "shutdown",
)


@dataclass(frozen=True)
class Milestone:
    name: str  # one of MILESTONES


@dataclass(frozen=True)
class ServerArgsDump:
    """The effective server args a server logged at start. Also marks the "server_args" milestone."""

    args: dict[str, Any]


FAILURE_KINDS = ("crashed", "oom", "context_length")


@dataclass(frozen=True)
class FailureSignal:
    kind: str  # one of FAILURE_KINDS
    message: str


LogFact = ShardProgress | DecodeStats | PrefillStats | Milestone | ServerArgsDump | FailureSignal


@dataclass(frozen=True)
class Failure:
    """The evidence of a failed server: lines[first_line : last_line + 1] prove it."""

    kind: str
    message: str
    first_line: int
    last_line: int
