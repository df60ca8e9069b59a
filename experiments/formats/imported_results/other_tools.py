"""Files of tools specdash does not import (pure): which tool wrote a file, by the keys only that tool's file has,
so the import refuses it by the tool's name ("an llm-d benchmark report") and says what to import instead, never in
another tool's terms (a vLLM field error for an AIPerf file).

Each file is told by its own keys, read from the tool's source: llm-d-benchmark benchmark_report/schema_v0_1.py
(`version`, `scenario`, `metrics`) and br_v0_2_example.yaml (`version`, `run`, `scenario`, `results`); MLflow's run
(`info.run_id` and `data`; its folder's meta.yaml: `artifact_uri`, `experiment_id`, `lifecycle_stage`); Weights &
Biases' wandb-summary.json (`_wandb`, or `_runtime` with `_timestamp`); LLMPerf's summary (`results_*` with
`num_concurrent_requests`) and its per-request list (`ttft_s`, `end_to_end_latency_s`); inference-perf's
summary_lifecycle_metrics.json (`load_summary`, `successes`); `vllm bench throughput` (`elapsed_time`,
`tokens_per_second`) and `vllm bench latency` (`avg_latency`, `latencies`); SGLang's bench_one_batch_server lines
(`run_name`, `batch_size`, `overall_throughput`); and AIPerf's files that hold no results (inputs.json,
profile_export_raw.jsonl, the timeslice, phase-manifest, server-metrics time-series and GPU telemetry exports). A tool
with a reader of its own (GuideLLM, genai-bench, `vllm bench sweep`, SpecForge's bench_eagle3) is told by that reader
first (`detect` asks this table last), so the table names only what no reader takes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .. import bounded_json

# name, test on the top-level object (or the first line of JSON lines), what to import instead
Test = Callable[[dict[str, Any]], bool]
_AIPERF_RESULTS = (
    "import the run's profile_export_aiperf.json (with profile_export.jsonl and server_metrics_export.json)"
)


def _has(*keys: str) -> Test:
    return lambda row: all(key in row for key in keys)


def _mlflow(row: dict[str, Any]) -> bool:
    run = row.get("run", row)
    return isinstance(run, dict) and isinstance(run.get("info"), dict) and "run_id" in run["info"] and "data" in run


def _wandb(row: dict[str, Any]) -> bool:
    return "_wandb" in row or {"_runtime", "_timestamp"} <= row.keys()


def _llmperf(row: dict[str, Any]) -> bool:
    return "num_concurrent_requests" in row and any(str(key).startswith("results_") for key in row)


def _aiperf_raw(row: dict[str, Any]) -> bool:
    meta = row.get("metadata")
    return isinstance(meta, dict) and "request_start_ns" in meta and "metrics" not in row


def _aiperf_manifest(row: dict[str, Any]) -> bool:
    phases = row.get("phases")
    return isinstance(phases, list) and bool(phases) and isinstance(phases[0], dict) and "metrics_json" in phases[0]


def _aiperf_inputs(row: dict[str, Any]) -> bool:
    data = row.get("data")
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "session_id" in data[0]


TOOLS: tuple[tuple[str, Test, str], ...] = (
    ("an llm-d benchmark report (schema 0.2)", _has("version", "run", "scenario", "results"),
     "import the harness's own result file the report was made from (vllm bench serve's JSON, an AIPerf summary)"),
    ("an llm-d benchmark report (schema 0.1)", _has("version", "scenario", "metrics"),
     "import the harness's own result file the report was made from (vllm bench serve's JSON, an AIPerf summary)"),
    ("an MLflow run", _mlflow, "import the result file the run logged as an artifact"),
    ("an MLflow run (meta.yaml)", _has("artifact_uri", "experiment_id", "lifecycle_stage"),
     "import the result file the run logged as an artifact"),
    ("a Weights & Biases run summary (wandb-summary.json)", _wandb,
     "import the result file the run logged as an artifact"),
    ("an LLMPerf summary (*_summary.json)", _llmperf, "run the benchmark with SGLang's bench_serving or AIPerf"),
    ("LLMPerf per-request results (*_individual_responses.json)", _has("ttft_s", "end_to_end_latency_s"),
     "run the benchmark with SGLang's bench_serving or AIPerf"),
    ("an inference-perf report (summary_lifecycle_metrics.json)", _has("load_summary", "successes"),
     "run the benchmark with SGLang's bench_serving or AIPerf"),
    ("a vllm bench throughput result", _has("elapsed_time", "num_requests", "tokens_per_second"),
     "offline throughput has no serving latencies and no concurrency: import a vllm bench serve --save-result JSON"),
    ("a vllm bench latency result", _has("avg_latency", "latencies"),
     "one batch's latency is no serving cell: import a vllm bench serve --save-result JSON"),
    ("an SGLang bench_one_batch_server result", _has("run_name", "batch_size", "overall_throughput"),
     "one batch at a time is no serving cell: import bench_serving's --output-file JSONL"),
    ("an AIPerf raw request export (profile_export_raw.jsonl)", _aiperf_raw, _AIPERF_RESULTS),
    ("an AIPerf inputs file (inputs.json)", _aiperf_inputs, _AIPERF_RESULTS),
    ("an AIPerf timeslice export", _has("timeslices", "input_config"), _AIPERF_RESULTS),
    ("an AIPerf phase manifest (phase_manifest.json)", _aiperf_manifest, _AIPERF_RESULTS),
    ("an AIPerf server-metrics time series (server_metrics_export.jsonl)",
     _has("endpoint_url", "timestamp_ns", "metrics"),
     "import server_metrics_export.json with the run's profile_export_aiperf.json"),
    ("an AIPerf GPU telemetry export", _has("gpu_uuid", "timestamp_ns"), _AIPERF_RESULTS),
)  # fmt: skip

_YAML_KEY = re.compile(r"^([A-Za-z_][\w-]*):", re.MULTILINE)


def identify(content: str) -> tuple[str, str] | None:
    """The tool that wrote a file specdash does not import, and what to import instead; None for any other file.
    JSON is read whole, else its first line (JSON lines); YAML (llm-d's report, MLflow's meta.yaml) by its
    top-level keys."""
    text = content.strip()
    row: Any
    try:
        row = bounded_json.loads(text, allow_nan=True)
    except ValueError:
        try:
            row = bounded_json.loads(text.split("\n", 1)[0], allow_nan=True)
        except ValueError:
            row = dict.fromkeys(_YAML_KEY.findall(text[:200_000]))
    if isinstance(row, list) and row and isinstance(row[0], dict):
        row = row[0]  # a list of records (LLMPerf's per-request results)
    if not isinstance(row, dict) or not row:
        return None
    for name, test, instead in TOOLS:
        if test(row):
            return name, instead
    return None


def refusal(content: str) -> str:
    """What the import answers for such a file: "line 1: <tool's file>: ... ; <what to import instead>"."""
    found = identify(content)
    if found is None:
        return "line 1: a file of a tool specdash does not import"
    name, instead = found
    return f"line 1: this is {name}, which specdash does not import: {instead}"
