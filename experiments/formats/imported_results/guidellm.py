"""GuideLLM benchmark reports (pure): the `benchmarks.json` that `guidellm benchmark` writes, one benchmark per
strategy it ran, each a cell where its strategy holds a concurrency.

Three report layouts, read alike: 0.2-0.3 (`{benchmarks: [{args: {strategy}, request_totals, worker: {backend_model},
metrics, duration}]}`), 0.4-0.6 (`metadata.version` 1, `args`) and 0.7 on (`metadata.version` 2, `config`), whose
benchmarks hold `config.strategy` and `metrics.request_totals` (guidellm/benchmark/schemas/report.py, benchmark.py,
metrics.py). Which fields map: strategy `synchronous` -> concurrency 1, `concurrent` -> its `streams`, `throughput`
-> its `max_concurrency`; `duration` -> duration; `request_totals.successful`, `.errored` -> completed, failed;
`requests_per_second`, `output_tokens_per_second`, `tokens_per_second` `.total.mean` (what GuideLLM's console
prints) -> request, output and total throughput, input throughput the difference; `time_to_first_token_ms`,
`inter_token_latency_ms` and `request_latency` (seconds) `.successful` mean, median, p90, p99 -> TTFT, TPOT and
end-to-end latency. A naming trap: GuideLLM's "inter token latency" is specdash's TPOT ((last token - first token) /
(output tokens - 1), weighted by each request's tokens: the same as specdash's mean where outputs are of one length),
and its "time per output token" includes the first token (kept raw); it has no per-chunk ITL.

Refused by name: a benchmark at a request rate (`constant`, `poisson`: a sweep's rate steps), a `throughput` run
without a concurrency bound, or a trace replay: specdash's cells are concurrencies, and a rate is not one. A YAML
report is refused with how to get the JSON one.
"""

from __future__ import annotations

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
    one_object,
    read_given,
    text_of,
)

TOOL = "GuideLLM"
STATED_AT = {name: f"given.{name}" for name in GIVEN}
MAX_BENCHMARKS = 1000
THROUGHPUTS = {
    "requests_per_second": "request_throughput",
    "output_tokens_per_second": "output_throughput",
    "tokens_per_second": "total_throughput",
}
LATENCIES = {"time_to_first_token_ms": "ttft", "inter_token_latency_ms": "tpot", "request_latency": "e2e_latency"}
STATS = {"mean": "mean", "median": "median", "p90": "p90", "p99": "p99"}


def is_report(row: Any) -> bool:
    """What `detect` asks: a list of benchmarks typed as GuideLLM types them."""
    benchmarks = row.get("benchmarks") if isinstance(row, dict) else None
    return (
        isinstance(benchmarks, list)
        and bool(benchmarks)
        and isinstance(benchmarks[0], dict)
        and benchmarks[0].get("type_") in ("generative_benchmark", "benchmark")
    )


def looks_like_yaml_report(text: str) -> bool:
    return text.lstrip().startswith(("benchmarks:", "metadata:")) and "type_: generative_benchmark" in text


def parse(content: str, given: Mapping[str, Any] | Given) -> list[ImportedRun]:
    if looks_like_yaml_report(content):
        raise ResultFileError(
            [
                "line 1: a GuideLLM YAML report: import its JSON instead (run with --output kind=json, or from this "
                "file `guidellm export <file> --output kind=json` since 0.7.3, `guidellm benchmark from-file` before)"
            ]
        )
    errors: list[str] = []
    check = Checker(1, errors)
    row = one_object(content, TOOL)
    if not isinstance(given, Given):
        given = read_given(given, errors)
    benchmarks = row.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks or len(benchmarks) > MAX_BENCHMARKS:
        check.fail("benchmarks", f"missing or not a list of 1 to {MAX_BENCHMARKS} benchmarks")
        raise ResultFileError(errors)
    metadata = _object(row.get("metadata"))
    settings = _object(row.get("config") or row.get("args"))  # 0.7 on: config (0.8: its spec); 0.4-0.6: args
    settings = _object(settings.get("spec")) or settings
    model, model_at = _model(row, benchmarks)
    cells: list[Cell] = []
    shapes: list[tuple[int, int, int]] = []
    for index, benchmark in enumerate(benchmarks):
        read = _benchmark(benchmark, f"benchmarks[{index}]", check, given)
        if read is not None:
            cells.append(read[0])
            shapes.append(read[1])
        if len(errors) >= MAX_ERRORS:
            break
    server = given.server(
        check,
        {"model_path": model},
        where={**STATED_AT, "model_path": model_at},
        why="the GuideLLM report names no model (its backend chose the server's first)",
    )
    if errors or server is None or not cells:
        raise ResultFileError(errors[:MAX_ERRORS])
    # Its benchmarks share one data set: synthetic data's own lengths, else the measured means of the first.
    input_len, output_len, count = shapes[0]
    version = metadata.get("guidellm_version")
    data = settings.get("data")
    data = data[0] if isinstance(data, list) and data else data
    dataset = text_of(data)
    if isinstance(data, dict):
        dataset = text_of(data.get("kind"))
        input_len = _tokens(data.get("prompt_tokens"), input_len)
        output_len = _tokens(data.get("output_tokens"), output_len)
    return [
        ImportedRun(
            tool=TOOL,
            version=str(version)[:MAX_TEXT] if isinstance(version, str) else "",
            command="",
            server=server,
            server_args={},
            dataset=(dataset or "guidellm")[:DATASET_MAX],
            input_len=input_len,
            output_len=output_len,
            num_prompts=count,
            cells=cells,
            engine=given.engine or "",
        )
    ]


def _model(report: dict[str, Any], benchmarks: list[Any]) -> tuple[str | None, str]:
    """The model the report names and where: the run's settings (0.4 on) or the first benchmark's worker (before)."""
    config = _object(report.get("config"))
    spec = _object(config.get("spec"))
    first = _object(benchmarks[0])
    candidates = [
        (_object(spec.get("backend")), "model", "config.spec.backend.model"),  # 0.8 on
        (_object(config.get("backend")), "model", "config.backend.model"),  # 0.7
        (config, "model", "config.model"),
        (_object(report.get("args")), "model", "args.model"),  # 0.4-0.6
        (_object(first.get("worker")), "backend_model", "benchmarks[0].worker.backend_model"),  # 0.2-0.3
    ]
    for holder, key, where in candidates:
        value = holder.get(key)
        if isinstance(value, str) and value.strip() and value != "None":
            return value.strip()[:MAX_TEXT], where
    return None, "config.spec.backend.model"


def _benchmark(benchmark: Any, where: str, check: Checker, given: Given) -> tuple[Cell, tuple[int, int, int]] | None:
    if not isinstance(benchmark, dict):
        check.fail(where, "not an object")
        return None
    before = len(check.errors)
    config = benchmark.get("config") or benchmark.get("args")
    strategy = config.get("strategy") if isinstance(config, dict) else None
    holder = "config" if "config" in benchmark else "args"
    said = _concurrency(strategy, f"{where}.{holder}.strategy", check)
    concurrency = given.resolve("concurrency", said, check, where=f"{where}.{holder}.strategy")
    metrics = benchmark.get("metrics")
    if not isinstance(metrics, dict):
        check.fail(f"{where}.metrics", "missing or not an object")
        return None
    totals = metrics.get("request_totals", benchmark.get("request_totals"))
    if not isinstance(totals, dict):
        check.fail(f"{where}.metrics.request_totals", "missing or not an object")
        totals = {}
    read: dict[str, Any] = {
        "duration_s": _duration(benchmark, where, check),
        "completed": check.integer(totals, "successful", prefix=f"{where}.metrics.request_totals.", minimum=1),
        "failed": check.integer(totals, "errored", prefix=f"{where}.metrics.request_totals.", optional=True),
    }
    for source, target in THROUGHPUTS.items():
        read[target] = _stat(metrics, source, "total", "mean", where, check, optional=target == "total_throughput")
    for source, target in LATENCIES.items():
        scale = 1000.0 if source == "request_latency" else 1.0  # GuideLLM's request latency is in seconds
        for stat, name in STATS.items():
            value = _stat(metrics, source, "successful", stat, where, check, optional=True)
            read[f"{name}_{target}_ms"] = value * scale if value is not None else None
    if len(check.errors) > before or concurrency is None:
        return None
    total = read.pop("total_throughput")
    read["total_throughput"] = total if total is not None else read["output_throughput"]
    read["input_throughput"] = max(0.0, read["total_throughput"] - read["output_throughput"])
    read["failed"] = read["failed"] or 0
    raw: dict[str, Any] = {"strategy": strategy.get("type_")} if isinstance(strategy, dict) else {}
    raw["incomplete"] = totals.get("incomplete") if isinstance(totals.get("incomplete"), int) else None
    for stat in STATS:
        value = _stat(metrics, "time_per_output_token_ms", "successful", stat, where, check, optional=True)
        raw[f"{stat}_time_per_output_token_with_first_ms"] = value
    raw["tpot_from"] = "GuideLLM inter_token_latency_ms (weighted by output tokens)"
    shape = (
        _mean_count(metrics, "prompt_token_count"),
        _mean_count(metrics, "output_token_count"),
        read["completed"] + read["failed"],
    )
    return Cell(concurrency=concurrency, line=1, metrics=read, raw=raw), shape


def _concurrency(strategy: Any, where: str, check: Checker) -> int | None:
    """The concurrency a strategy held, or a refusal saying what the benchmark was instead."""
    if not isinstance(strategy, dict):
        check.fail(where, "missing or not an object")
        return None
    kind = strategy.get("type_")
    if kind == "synchronous":
        return 1
    if kind == "concurrent":
        return check.integer(strategy, "streams", prefix=where + ".", minimum=1)
    if kind == "throughput" and strategy.get("max_concurrency") is not None:
        return check.integer(strategy, "max_concurrency", prefix=where + ".", minimum=1)
    if kind in ("constant", "poisson"):
        rate = strategy.get("rate")
        shown = f"{rate:g} requests/s" if isinstance(rate, int | float) and not isinstance(rate, bool) else "a rate"
        check.fail(
            where + ".type_",
            f"a {kind} benchmark at {shown}: specdash's cells are concurrencies, and GuideLLM held none; import a "
            "report of --profile concurrent (or synchronous) benchmarks",
        )
    elif kind == "throughput":
        check.fail(
            where + ".max_concurrency",
            "a throughput benchmark with no concurrency bound: specdash's cells are concurrencies; rerun with "
            "--profile concurrent --rate N, or state the concurrency it reached (`concurrency` / --concurrency)",
        )
    else:
        check.fail(where + ".type_", f"{str(kind)[:40]!r}: not a strategy at a concurrency (synchronous, concurrent)")
    return None


def _duration(benchmark: dict[str, Any], where: str, check: Checker) -> float | None:
    if benchmark.get("duration") is None and "start_time" in benchmark and "end_time" in benchmark:
        start = check.number(benchmark, "start_time", prefix=where + ".")
        end = check.number(benchmark, "end_time", prefix=where + ".")
        duration = end - start if start is not None and end is not None else None
    else:
        duration = check.number(benchmark, "duration", prefix=where + ".")
    if duration is not None and duration <= 0:
        check.fail(where + ".duration", "not a positive number of seconds: no throughput can be read")
        return None
    return duration


def _stat(
    metrics: dict[str, Any], name: str, status: str, stat: str, where: str, check: Checker, *, optional: bool
) -> float | None:
    """`metrics.<name>.<status>.<stat>`; GuideLLM keeps p90 and p99 under `percentiles`."""
    summary = metrics.get(name)
    part = summary.get(status) if isinstance(summary, dict) else None
    if isinstance(part, dict) and stat in ("p90", "p99"):
        part = part.get("percentiles")
    if not isinstance(part, dict):
        if not optional:
            check.fail(f"{where}.metrics.{name}.{status}", "missing or not an object")
        return None
    path = f"{where}.metrics.{name}.{status}." + ("percentiles." if stat in ("p90", "p99") else "")
    return check.number(part, stat, prefix=path, optional=optional)


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _tokens(value: Any, measured: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31 else measured


def _mean_count(metrics: dict[str, Any], name: str) -> int:
    summary = metrics.get(name)
    part = summary.get("successful") if isinstance(summary, dict) else None
    mean = part.get("mean") if isinstance(part, dict) else None
    if isinstance(mean, int | float) and not isinstance(mean, bool) and 0 < mean < 2**31:
        return max(1, round(mean))
    return 1
