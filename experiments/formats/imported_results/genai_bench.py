"""genai-bench run files (pure): each `<scenario>_<task>_num_concurrency_<N>_time_<T>s.json` that `genai-bench
benchmark` writes into its experiment folder is one run of one traffic scenario at one concurrency, one cell.

The file is `{aggregated_metrics, individual_request_metrics, _time_unit}` (genai_bench/metrics/
aggregated_metrics_collector.py `save`; `_time_unit` since 0.0.3, seconds before). Which fields map:
`num_concurrency` -> the cell's concurrency; `run_duration` -> duration; `num_completed_requests`,
`num_error_requests` -> completed, failed; `requests_per_second` -> request throughput;
`mean_{output,input,total_tokens}_throughput_tokens_per_s` -> output, input, total throughput (despite "mean" these
are the run's token sums over its duration, not a mean of requests); `stats.{ttft,tpot,e2e_latency}.{mean,p50,p90,
p99}` -> the latency columns (genai-bench's TPOT is specdash's: (latency - TTFT) / (output tokens - 1)). It measures
no inter-token gap (no ITL) and no acceptance. The model is named by the experiment's `experiment_metadata.json`, not
the run file, so the importer states it (`given`). Refused by name: a run by `batch_size` (an embedding task) and the
experiment's metadata file (no results in it). The per-request rows are not imported: the aggregate leaves out the
warm-up and cool-down requests (`--warmup-ratio`, `--cooldown-ratio`), which the rows do not mark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .common import (
    DATASET_MAX,
    GIVEN,
    MAX_ERRORS,
    MAX_TEXT,
    Cell,
    Checker,
    Given,
    ImportedRun,
    ResultFileError,
    is_scalar,
    one_object,
    read_given,
)

TOOL = "genai-bench"
SCALARS = {
    "run_duration": "duration_s",
    "num_completed_requests": "completed",
    "num_error_requests": "failed",
    "requests_per_second": "request_throughput",
    "mean_output_throughput_tokens_per_s": "output_throughput",
    "mean_input_throughput_tokens_per_s": "input_throughput",
    "mean_total_tokens_throughput_tokens_per_s": "total_throughput",
}
REQUIRED = ("run_duration", "num_completed_requests", "requests_per_second", "mean_output_throughput_tokens_per_s")
LATENCIES = {"ttft": "ttft", "tpot": "tpot", "e2e_latency": "e2e_latency"}  # genai-bench's stats -> specdash's
STATS = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
STATED_AT = {name: f"given.{name}" for name in GIVEN}
# "D(100,100)": every request 100 tokens in, 100 out (genai_bench/scenarios: deterministic); others are distributions.
DETERMINISTIC = re.compile(r"D\((\d{1,9}),(\d{1,9})\)")


def is_genai_bench(row: dict[str, Any]) -> bool:
    """A run file, or the experiment's metadata file (which `parse` refuses by name)."""
    aggregated = row.get("aggregated_metrics")
    return (isinstance(aggregated, dict) and "num_concurrency" in aggregated) or {
        "benchmark_version",
        "num_concurrency",
        "traffic_scenario",
    } <= row.keys()


def parse(content: str, given: Mapping[str, Any] | Given) -> list[ImportedRun]:
    errors: list[str] = []
    check = Checker(1, errors)
    row = one_object(content, TOOL)
    if not isinstance(given, Given):
        given = read_given(given, errors)
    aggregated = row.get("aggregated_metrics")
    if aggregated is None and "benchmark_version" in row and "num_concurrency" in row:
        raise ResultFileError(
            [
                "line 1: a genai-bench experiment_metadata.json holds the experiment's settings, not its results: "
                "import the run files beside it (<scenario>_<task>_num_concurrency_<N>_time_<T>s.json), stating the "
                "model its `model` names (`model_path` / --model)"
            ]
        )
    if not isinstance(aggregated, dict):
        check.fail("aggregated_metrics", "missing or not an object (genai-bench writes it in every run file)")
        raise ResultFileError(errors[:MAX_ERRORS])
    unit = row.get("_time_unit", "s")  # absent before 0.0.3, whose files are in seconds
    if unit not in ("s", "ms"):
        check.fail("_time_unit", "not 's' or 'ms'")
    if aggregated.get("iteration_type", "num_concurrency") != "num_concurrency":
        check.fail(
            "aggregated_metrics.iteration_type",
            f"{str(aggregated.get('iteration_type'))[:40]!r}: a run by batch size (an embedding task), not by "
            "concurrency; specdash imports genai-bench's generation runs (--num-concurrency)",
        )
        raise ResultFileError(errors[:MAX_ERRORS])
    where = "aggregated_metrics."
    said = check.integer(aggregated, "num_concurrency", prefix=where, minimum=1)
    metrics: dict[str, Any] = {}
    for source, target in SCALARS.items():
        reader = check.integer if target in ("completed", "failed") else check.number
        metrics[target] = reader(aggregated, source, prefix=where, optional=source not in REQUIRED)
    stats = aggregated.get("stats")
    if not isinstance(stats, dict):
        check.fail(where + "stats", "missing or not an object")
        stats = {}
    scale = 1000.0 if unit == "s" else 1.0
    for source, target in LATENCIES.items():
        field = stats.get(source)
        if field is None:
            continue
        if not isinstance(field, dict):
            check.fail(f"{where}stats.{source}", "not an object")
            continue
        for stat, name in STATS.items():
            value = check.number(field, stat, prefix=f"{where}stats.{source}.", optional=True)
            metrics[f"{name}_{target}_ms"] = value * scale if value is not None else None
    stated = Checker(1, errors)
    server = given.server(stated, {}, where=STATED_AT, why="a genai-bench run file does not name its model")
    concurrency = given.resolve("concurrency", said, stated, where=where + "num_concurrency")
    if metrics["duration_s"] == 0:
        check.fail(where + "run_duration", "zero: no throughput can be read")
    if errors or server is None or concurrency is None:
        raise ResultFileError(errors[:MAX_ERRORS])
    if metrics["input_throughput"] is None:
        metrics["input_throughput"] = 0.0
    if metrics["total_throughput"] is None:
        metrics["total_throughput"] = metrics["output_throughput"] + metrics["input_throughput"]
    if metrics["failed"] is None:
        metrics["failed"] = 0
    raw = {k: v for k, v in aggregated.items() if k not in SCALARS and is_scalar(v)}
    for source, field in stats.items():
        if isinstance(field, dict) and source in LATENCIES:
            raw.update({f"{s}_{source}_s": v for s, v in field.items() if s in ("stddev", "p95") and is_scalar(v)})
    raw["time_unit"] = unit
    scenario = aggregated.get("scenario")
    scenario = scenario[:MAX_TEXT] if isinstance(scenario, str) else ""
    input_len, output_len = _lengths(scenario, stats)
    count = aggregated.get("num_requests")
    return [
        ImportedRun(
            tool=TOOL,
            version="",
            command="",
            server=server,
            server_args={},
            dataset=scenario[:DATASET_MAX] or "genai-bench",
            input_len=input_len,
            output_len=output_len,
            num_prompts=count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1,
            cells=[Cell(concurrency=concurrency, line=1, metrics=metrics, raw=raw)],
            engine=given.engine or "",
        )
    ]


def _lengths(scenario: str, stats: dict[str, Any]) -> tuple[int, int]:
    """A deterministic scenario's own lengths; else the mean token counts genai-bench measured."""
    if match := DETERMINISTIC.fullmatch(scenario):
        return max(1, int(match[1])), max(1, int(match[2]))
    lengths = []
    for name in ("num_input_tokens", "num_output_tokens"):
        field = stats.get(name)
        mean = field.get("mean") if isinstance(field, dict) else None
        if isinstance(mean, int | float) and not isinstance(mean, bool) and 0 < mean < 2**31:
            lengths.append(max(1, round(mean)))
        else:
            lengths.append(1)
    return lengths[0], lengths[1]
