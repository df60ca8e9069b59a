"""`/metrics`: vLLM's V1 Prometheus names in prometheus_client's text exposition (reference §3.2): counters as
`<name>_total` plus a `<name>_created` gauge family, labels sorted, values as prometheus_client writes floats.

The simulator's subset of the names: the spec-decode counters, the request gauges, KV cache usage, token and
request counters, prefix cache counters and the end-to-end latency histogram (on the simulated GPU's clock). The
HTTP instrumentator's and Python's process metrics are left out; with --disable-log-stats no `vllm:*` exists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from simhost.engine import E2E_BUCKETS


def go_float(value: float) -> str:
    """A value as prometheus_client prints it: Python's repr, switched to an exponent where Go would
    (`1.7961536906873662e+09`), `+Inf`/`-Inf`/`NaN`."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6 and "e" not in text:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{key}="{labels[key]}"' for key in sorted(labels)) + "}"


def gauge(name: str, help_text: str, samples: Sequence[tuple[dict[str, str], float]]) -> list[str]:
    out = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    out += [f"{name}{_labels(labels)} {go_float(value)}" for labels, value in samples]
    return out


def counter(name: str, help_text: str, samples: Sequence[tuple[dict[str, str], float]], created: float) -> list[str]:
    out = [f"# HELP {name}_total {help_text}", f"# TYPE {name}_total counter"]
    out += [f"{name}_total{_labels(labels)} {go_float(value)}" for labels, value in samples]
    out += [f"# HELP {name}_created {help_text}", f"# TYPE {name}_created gauge"]
    out += [f"{name}_created{_labels(labels)} {go_float(created)}" for labels, _ in samples]
    return out


def histogram(
    name: str,
    help_text: str,
    labels: dict[str, str],
    bounds: Sequence[float],
    buckets: Sequence[int],
    total: float,
    count: int,
    created: float,
) -> list[str]:
    """Cumulative `_bucket{le=...}` lines (`buckets` holds each bound's cumulative count), `_count`, `_sum`, then
    the `_created` family."""
    out = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for bound, value in zip([*bounds, math.inf], [*buckets, count], strict=True):
        out.append(f"{name}_bucket{_labels({**labels, 'le': go_float(bound)})} {go_float(value)}")
    out += [f"{name}_count{_labels(labels)} {go_float(count)}", f"{name}_sum{_labels(labels)} {go_float(total)}"]
    out += [f"# HELP {name}_created {help_text}", f"# TYPE {name}_created gauge"]
    out.append(f"{name}_created{_labels(labels)} {go_float(created)}")
    return out


@dataclass
class Snapshot:
    """Everything one scrape reports."""

    model_name: str
    created: float
    running: int
    waiting: int
    kv_usage: float
    prompt_tokens: int
    generation_tokens: int
    finished_requests: int
    prefix_queries: int
    prefix_hits: int
    e2e_sum: float
    e2e_count: int
    e2e_buckets: Sequence[int]
    spec: tuple[int, int, int, Sequence[int]] | None  # drafts, draft tokens, accepted, per position


def exposition(snap: Snapshot) -> str:
    labels = {"engine": "0", "model_name": snap.model_name}
    c = snap.created
    out: list[str] = []
    out += gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", [(labels, snap.running)]
    )
    out += gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", [(labels, snap.waiting)])
    out += gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", [(labels, snap.kv_usage)])
    out += counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        [(labels, snap.prefix_queries)],
        c,
    )
    out += counter(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        [(labels, snap.prefix_hits)],
        c,
    )
    out += counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", [(labels, 0)], c)
    out += counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [(labels, snap.prompt_tokens)], c)
    out += counter(
        "vllm:generation_tokens", "Number of generation tokens processed.", [(labels, snap.generation_tokens)], c
    )
    reasons = [
        ({**labels, "finished_reason": reason}, snap.finished_requests if reason == "length" else 0)
        for reason in ("stop", "length", "abort")
    ]
    out += counter("vllm:request_success", "Count of successfully processed requests.", reasons, c)
    # simhost's engine.Stats counts each bucket as "seconds <= bound": cumulative already, as Prometheus wants
    out += histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        labels,
        E2E_BUCKETS,
        list(snap.e2e_buckets),
        snap.e2e_sum,
        snap.e2e_count,
        c,
    )
    if snap.spec is not None:
        drafts, draft_tokens, accepted, per_position = snap.spec
        out += counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [(labels, drafts)], c)
        out += counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [(labels, draft_tokens)], c)
        out += counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [(labels, accepted)], c)
        positions = [({**labels, "position": str(i)}, value) for i, value in enumerate(per_position)]
        out += counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", positions, c
        )
    return "\n".join(out) + "\n"
