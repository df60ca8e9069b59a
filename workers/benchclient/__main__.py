"""Command line: run one benchmark cell and print its result as one JSON object on stdout.

Exit codes: 0 when the run happened (even with failed requests), 1 when no request could reach the
server, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from . import prometheus, steady_state
from .client import BACKENDS, BenchConfig, run_benchmark
from .transport import parse_base_url


def _base_url(text: str) -> str:
    try:
        parse_base_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _scrape_interval_ms(text: str) -> int:
    value = int(text)
    if value != 0 and not prometheus.MIN_INTERVAL_MS <= value <= prometheus.MAX_INTERVAL_MS:
        raise argparse.ArgumentTypeError(
            f"must be 0 (off) or {prometheus.MIN_INTERVAL_MS}-{prometheus.MAX_INTERVAL_MS}, got {value}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="benchclient",
        description="Streaming load generator for an SGLang or vLLM server (bench_serving semantics, random ids).",
    )
    parser.add_argument(
        "--base-url", type=_base_url, required=True, help="e.g. http://127.0.0.1:30000 (plain http only)"
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="sglang",
        help="sglang: SGLang's /generate; sglang-oai: SGLang's /v1/completions; vllm: a vLLM server's /v1/completions",
    )
    parser.add_argument("--concurrency", type=_positive_int, required=True, help="requests in flight at most")
    parser.add_argument("--num-prompts", type=_positive_int, required=True)
    parser.add_argument("--input-len", type=_positive_int, required=True, help="prompt length in tokens")
    parser.add_argument("--output-len", type=_positive_int, required=True, help="generated tokens per request")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup-requests", type=_non_negative_int, default=1)
    parser.add_argument("--request-timeout", type=_positive_float, default=600.0, help="seconds per request")
    parser.add_argument("--vocab-size", type=_positive_int, default=32000, help="random ids are below this")
    parser.add_argument("--prompts-file", help="a sampled prompt set (JSONL); replaces random ids")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument(
        "--steady-state-concurrency-ratio",
        type=_ratio,
        default=steady_state.DEFAULT_RATIO,
        help="steady state: the longest stretch with at least this share of the concurrency in flight",
    )
    parser.add_argument(
        "--metrics-interval-ms",
        type=_scrape_interval_ms,
        default=prometheus.DEFAULT_INTERVAL_MS,
        help="scrape the server's /metrics gauges this often during the cell; 0: never",
    )
    parser.add_argument(
        "--stream-metrics",
        action="store_true",
        help="print those samples on stderr as they are taken; the result then holds only the rest",
    )
    parser.add_argument("--keep-outputs", action="store_true", help="report each request's output token ids")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = BenchConfig(
        base_url=args.base_url,
        backend=args.backend,
        concurrency=args.concurrency,
        num_prompts=args.num_prompts,
        input_len=args.input_len,
        output_len=args.output_len,
        seed=args.seed,
        warmup_requests=args.warmup_requests,
        request_timeout=args.request_timeout,
        vocab_size=args.vocab_size,
        prompts_file=args.prompts_file,
        temperature=args.temperature,
        top_p=args.top_p,
        keep_outputs=args.keep_outputs,
        steady_state_ratio=args.steady_state_concurrency_ratio,
        metrics_interval_ms=args.metrics_interval_ms,
        stream_metrics=args.stream_metrics,
    )
    result, exit_code = asyncio.run(run_benchmark(config))
    sys.stdout.write(json.dumps(result, allow_nan=False) + "\n")
    sys.stdout.flush()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
