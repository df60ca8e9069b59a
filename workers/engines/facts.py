"""The facts a server log carries, as values: what every engine's log grammar returns (`loglines`, `failures`,
`warnings` of workers/sglang and workers/vllm), so that the run lifecycle reads any engine's log the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ShardProgress:
    percent: int
    done: int
    total: int


@dataclass(frozen=True)
class CaptureProgress:
    """A CUDA-graph capture bar (`Capturing batches (bs=1 avail_mem=1.72 GB): 100%|...| 4/4`)."""

    percent: int
    done: int
    total: int


@dataclass(frozen=True)
class WeightsLoaded:
    """A model's weights loaded on one rank, with the GPU memory they took (GiB): SGLang's `Load weight end. ...
    mem usage=X GB.` (once per model per rank: the target's, then its drafter's); vLLM's `Model loading took X GiB`
    (target and drafter together: `models` is "all")."""

    rank: int | None
    gib: float
    models: str = "one"  # "one": one model per line, in loading order; "all": every model of the server at once


@dataclass(frozen=True)
class GraphCaptured:
    """`Capture [draft ][extend ]cuda graph end. Time elapsed: 18.28 s. ...` (all eras); which: "target", "draft"."""

    which: str
    elapsed_s: float | None


@dataclass(frozen=True)
class ServerLimits:
    """`max_total_num_tokens=..., max_running_requests=..., context_len=...`, logged once the pools are sized."""

    max_total_num_tokens: int
    max_running_requests: int | None
    context_len: int | None


@dataclass(frozen=True)
class Retraction:
    """`KV cache pool is full. Retract requests. #retracted_reqs: N, ...`: the KV pool ran out mid-decode."""

    retracted_reqs: int | None
    message: str


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


# Least to most specific: the finder keeps the most specific evidence in a window.
FAILURE_KINDS = ("crashed", "host_oom", "oom", "context_length")


@dataclass(frozen=True)
class FailureSignal:
    kind: str  # one of FAILURE_KINDS
    message: str


LogFact = (
    ShardProgress
    | CaptureProgress
    | GraphCaptured
    | WeightsLoaded
    | ServerLimits
    | Retraction
    | DecodeStats
    | PrefillStats
    | Milestone
    | ServerArgsDump
    | FailureSignal
)


@dataclass(frozen=True)
class ServerWarning:
    """A warning worth surfacing on the run, with the same message for every occurrence of its kind and cause (a
    run records it once)."""

    kind: str
    message: str
    value: int | None = None  # cuda_graph_limit: the largest batch size captured


@dataclass(frozen=True)
class Failure:
    """The evidence of a failed server: lines[first_line : last_line + 1] prove it."""

    kind: str
    message: str
    first_line: int
    last_line: int
