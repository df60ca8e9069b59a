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
from .common import (
    ENGINES,
    GIVEN,
    GIVEN_FLAGS,
    MAX_ERRORS,
    SPEC_FIELDS,
    Cell,
    Given,
    ImportedRun,
    ResultFileError,
    Server,
    read_given,
)

SGLANG = "sglang-bench-serving"
VLLM = "vllm-bench-serve"
SPECFORGE = "specforge-benchmark"
FORMATS = (SGLANG, VLLM, SPECFORGE)
AUTO = "auto"
SPECFORGE_GIVEN = GIVEN  # every format states the same fields (common.GIVEN); the old name kept for callers

__all__ = [
    "AUTO",
    "ENGINES",
    "FORMATS",
    "GIVEN",
    "GIVEN_FLAGS",
    "SGLANG",
    "SPECFORGE",
    "SPECFORGE_GIVEN",
    "SPEC_FIELDS",
    "VLLM",
    "Cell",
    "Given",
    "ImportedRun",
    "ResultFileError",
    "Server",
    "detect",
    "parse",
    "read_given",
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


def parse(content: str, fmt: str = AUTO, given: Mapping[str, Any] | Given | None = None) -> list[ImportedRun]:
    """The runs of a file's text; raises ResultFileError naming each bad line and field. `given`: what the importer
    states that the file does not say (common.GIVEN, the same names for every format); what the file says wins, and
    a given value that contradicts it is refused naming both."""
    stated: list[str] = []
    if not isinstance(given, Given):
        given = read_given(given, stated)
    if fmt == AUTO:
        fmt = detect(content)
    readers = {SGLANG: bench_serving.parse, VLLM: vllm_bench.parse, SPECFORGE: specforge.parse}
    if fmt not in readers:
        raise ResultFileError([*stated, f"format: unknown {fmt!r} (one of {', '.join((AUTO, *FORMATS))})"])
    try:
        runs = readers[fmt](content, given)
    except ResultFileError as exc:
        # The statement's own errors first, then the file's (read with what of the statement was valid).
        raise ResultFileError([*stated, *exc.errors][:MAX_ERRORS]) from None
    if stated:
        raise ResultFileError(stated)
    return runs
