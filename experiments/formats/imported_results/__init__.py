"""Benchmark result files made outside specdash (pure): SGLang `bench_serving` JSONL (its `--output-file` lines),
`vllm bench serve` JSON and `specforge benchmark --output-json` JSON, read into runs of cells whose metrics carry
`Measurement`'s names. One module per tool; `detect` and `parse` here are the one way in.

A file becomes one run per server it measured (the model and speculative settings that `server_info` reports), and
each of its lines (a vLLM file is one result) one cell at the line's `max_concurrency`; a concurrency seen twice is
a second pass. Validation is strict and every error names the line and the field, so nothing is guessed: a file
with any error is refused whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import bounded_json
from . import bench_serving, specforge, vllm_bench
from .common import SPEC_FIELDS, Cell, ImportedRun, ResultFileError, Server

SGLANG = "sglang-bench-serving"
VLLM = "vllm-bench-serve"
SPECFORGE = "specforge-benchmark"
FORMATS = (SGLANG, VLLM, SPECFORGE)
AUTO = "auto"
SPECFORGE_GIVEN = specforge.GIVEN

__all__ = [
    "AUTO",
    "FORMATS",
    "SGLANG",
    "SPECFORGE",
    "SPECFORGE_GIVEN",
    "SPEC_FIELDS",
    "VLLM",
    "Cell",
    "ImportedRun",
    "ResultFileError",
    "Server",
    "detect",
    "parse",
]


def detect(content: str) -> str:
    """The format of a file's text: a JSON object with `server_info` or several lines is bench_serving's."""
    text = content.strip()
    try:
        whole = bounded_json.loads(text, allow_nan=True)
    except ValueError:
        return SGLANG  # JSON lines (or nothing readable, which the SGLang reader then says line by line)
    if (
        isinstance(whole, dict)
        and "server_info" not in whole
        and ("total_token_throughput" in whole or "model_id" in whole)
    ):
        return VLLM
    return SGLANG


def parse(content: str, fmt: str = AUTO, given: Mapping[str, Any] | None = None) -> list[ImportedRun]:
    """The runs of a file's text; raises ResultFileError naming each bad line and field. `given`: what the
    importer states that the format does not hold (SpecForge's model and concurrency: SPECFORGE_GIVEN)."""
    if fmt == AUTO:
        fmt = detect(content)
    if fmt == SGLANG:
        return bench_serving.parse(content)
    if fmt == VLLM:
        return vllm_bench.parse(content)
    if fmt == SPECFORGE:
        return specforge.parse(content, given or {})
    raise ResultFileError([f"format: unknown {fmt!r} (one of {', '.join((AUTO, *FORMATS))})"])
