"""Benchmark result files made outside specdash (pure): SGLang `bench_serving` JSONL (its `--output-file` lines),
`vllm bench serve` JSON and `specforge benchmark --output-json` JSON, read into runs of cells whose metrics carry
`Measurement`'s names. One module per tool; `detect` and `parse` here are the one way in.

A file becomes one run per server it measured (the model and speculative settings that `server_info` reports), and
each of its lines (a vLLM file is one result) one cell at the line's `max_concurrency`; a concurrency seen twice is
a second pass. Validation is strict and every error names the line and the field, so nothing is guessed: a file
with any error is refused whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import bounded_json
from . import (
    aiperf,
    bench_serving,
    genai_bench,
    guidellm,
    other_tools,
    specforge,
    specforge_bench_eagle3,
    vllm_sweep,
)
from .common import (
    ENGINES,
    GIVEN,
    GIVEN_FLAGS,
    MAX_ERRORS,
    SPEC_FIELDS,
    Cell,
    Given,
    ImportedFile,
    ImportedRun,
    ResultFileError,
    Server,
    read_given,
)

SGLANG = "sglang-bench-serving"
VLLM = "vllm-bench-serve"
SPECFORGE = "specforge-benchmark"
AIPERF = "aiperf"
VLLM_SWEEP = "vllm-bench-sweep"
SPECFORGE_BENCH_EAGLE3 = "specforge-bench-eagle3"
GUIDELLM = "guidellm-report"
GENAI_BENCH = "genai-bench-run"
FORMATS = (SGLANG, VLLM, SPECFORGE, AIPERF, VLLM_SWEEP, SPECFORGE_BENCH_EAGLE3, GUIDELLM, GENAI_BENCH)
# What `detect` answers for a file of a tool specdash does not import; `parse` refuses it by the tool's name.
OTHER_TOOL = "other-tool"
AUTO = "auto"
SPECFORGE_GIVEN = GIVEN  # every format states the same fields (common.GIVEN); the old name kept for callers

__all__ = [
    "AIPERF",
    "AUTO",
    "ENGINES",
    "FORMATS",
    "GENAI_BENCH",
    "GIVEN",
    "GIVEN_FLAGS",
    "GUIDELLM",
    "OTHER_TOOL",
    "SGLANG",
    "SPECFORGE",
    "SPECFORGE_BENCH_EAGLE3",
    "SPECFORGE_GIVEN",
    "SPEC_FIELDS",
    "VLLM",
    "VLLM_SWEEP",
    "Cell",
    "Given",
    "ImportedFile",
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
    if aiperf.kind_of(text) is not None:
        return AIPERF
    if (mine := _mine(text)) is not None:
        return mine
    try:
        whole = bounded_json.loads(text, allow_nan=True)
    except ValueError:
        # JSON lines (or nothing readable, which the SGLang reader then says line by line), unless another tool's
        return OTHER_TOOL if other_tools.identify(text) is not None else SGLANG
    if (
        isinstance(whole, dict)
        and "server_info" not in whole
        and ("total_token_throughput" in whole or "model_id" in whole)
    ):
        return VLLM
    if other_tools.identify(text) is not None:
        return OTHER_TOOL  # after every reader's own test: it names only what no reader takes
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
    if fmt == OTHER_TOOL:
        raise ResultFileError([other_tools.refusal(content)])
    if fmt in (SGLANG, VLLM) and (named := _another_tools(content)):
        # Read as the chosen format, another tool's file would be refused in that format's terms.
        raise ResultFileError([f"line 1: this is {named}, not a {fmt} file: leave the format to auto"])
    readers: dict[str, Callable[[str, Given], list[ImportedRun]]] = {SGLANG: bench_serving.parse}
    readers |= {VLLM: vllm_sweep.parse_serve, SPECFORGE: specforge.parse}
    readers |= {AIPERF: aiperf.parse, VLLM_SWEEP: vllm_sweep.parse, GUIDELLM: guidellm.parse}
    readers |= {SPECFORGE_BENCH_EAGLE3: specforge_bench_eagle3.parse, GENAI_BENCH: genai_bench.parse}
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


def _mine(text: str) -> str | None:
    """The formats told by their own keys: a sweep's summary (CSV, a list of runs) or run, `--append-result`'s JSON
    lines, a GuideLLM report (JSON or YAML), a genai-bench run or metadata file, SpecForge's bench_eagle3 results."""
    if vllm_sweep.is_summary_csv(text) or guidellm.looks_like_yaml_report(text):
        return VLLM_SWEEP if vllm_sweep.is_summary_csv(text) else GUIDELLM
    try:
        whole = bounded_json.loads(text, allow_nan=True)
    except ValueError:
        if specforge_bench_eagle3.is_answers(text.split("\n", 1)[0]):
            return SPECFORGE_BENCH_EAGLE3
        return VLLM if vllm_sweep.is_result_lines(text) else None
    if isinstance(whole, list) and whole and all(vllm_sweep.is_sweep_record(row) for row in whole[:3]):
        return VLLM_SWEEP
    if not isinstance(whole, dict):
        return None
    if vllm_sweep.is_sweep_record(whole):
        return VLLM_SWEEP
    if guidellm.is_report(whole):
        return GUIDELLM
    if genai_bench.is_genai_bench(whole):
        return GENAI_BENCH
    return SPECFORGE_BENCH_EAGLE3 if specforge_bench_eagle3.is_bench_eagle3(whole) else None


def _another_tools(content: str) -> str | None:
    kind = aiperf.kind_of(content)
    found = other_tools.identify(content)
    return aiperf.NAMES[kind] if kind is not None else found[0] if found else None
