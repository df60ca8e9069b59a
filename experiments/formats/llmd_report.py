"""An experiment as llm-d Benchmark Reports, schema version 0.2.1 (pure): one report per benchmark cell, as
llm-d-benchmark's harnesses write one per benchmark run ("statistics for a particular combination of workload and
environment"). The schema is llm-d/llm-d-benchmark `llmdbenchmark/analysis/benchmark_report/
br_v0_2_1_json_schema.json` (read at commit 8bc9f1ddd873, with `schema_v0_2.py`'s unit checks): `version`, `run`
(`uid` required), `scenario` (`stack` of components, `load`) and `results` (`request_performance.aggregate`).

Mapped as llm-d's own vLLM-benchmark import maps a run (`native_to_br0_2.import_vllm_benchmark`): latencies in ms
(TPOT and ITL in ms/token), `p50` the median, throughputs in tokens/s and queries/s. `run.eid` groups every report of
one experiment; `run.uid` is stable, so a report exported twice is the same report.

The schema has no place for speculative decoding. specdash's figures go under `results.observability["x-specdash"]`
(EXTENSION_KEY; `observability` is the one results object the schema leaves open): the cell (config, run, launch,
pass), the speculative settings, every acceptance figure under its specdash column name (analysis/acceptance.py
defines each), and the comparison's row for a candidate at this concurrency (speedup over the baseline with its 95%
interval and verdict, over every pass of the cell, not this pass alone). The same settings are also the engine's
`native.args`, as SGLang's flags.
"""

from __future__ import annotations

import uuid
from typing import Any

from experiments.rules import launch_fields, model_checks

from .exported_experiment import ExportedCell, ExportedConfig, ExportedExperiment, finite

SCHEMA_VERSION = "0.2.1"
COMPONENT_SCHEMA_VERSION = "0.0.1"
EXTENSION_KEY = "x-specdash"
EXTENSION_VERSION = 1
# uuid5 namespace of every id specdash gives a report (fixed: the same cell always gets the same uid).
NAMESPACE = uuid.UUID("5b0f3b52-52a4-4f57-9d8e-6c1f0f0b7a11")
# Schema field -> (specdash's metric, units), as llm-d's vLLM import names and units them.
LATENCIES = {
    "time_to_first_token": ("ttft_ms", "ms"),
    "time_per_output_token": ("tpot_ms", "ms/token"),
    "inter_token_latency": ("itl_ms", "ms/token"),
    "request_latency": ("e2e_latency_ms", "ms"),
}
THROUGHPUTS = {
    "output_token_rate": ("output_throughput", "tokens/s"),
    "total_token_rate": ("total_throughput", "tokens/s"),
    "input_token_rate": ("input_throughput", "tokens/s"),
    "request_rate": ("request_throughput", "queries/s"),
}
ACCEPTANCE = (
    "accept_length",
    "pooled_accept_length",
    "mean_request_accept_length",
    "server_accept_length",
    "steady_state_accept_length",
)
COMPARISON = ("speedup", "ci_low", "ci_high", "verdict", "said", "baseline_tok_s", "candidate_tok_s")
RANDOM_DATASETS = ("random", "random-ids")


def benchmark_reports(experiment: ExportedExperiment) -> list[dict[str, Any]]:
    """One v0.2.1 report per cell, in the report's order."""
    return [report(experiment, cell) for cell in experiment.cells]


def report(experiment: ExportedExperiment, cell: ExportedCell) -> dict[str, Any]:
    config = experiment.config(cell.config)
    values = cell.values
    where = f"{experiment.key}/run/{cell.run}/pass/{cell.pass_index}/concurrency/{cell.concurrency}"
    body = _compact(
        {
            "version": SCHEMA_VERSION,
            "run": {
                "uid": uuid.uuid5(NAMESPACE, where).hex,
                "eid": uuid.uuid5(NAMESPACE, experiment.key).hex,
                "time": {"duration": _duration(finite(values["duration_s"]))},
                "user": experiment.owner,
                "description": (
                    f"{config.name} at concurrency {cell.concurrency}, pass {cell.pass_index + 1} of launch "
                    f"{cell.launch + 1} [specdash experiment {experiment.id}: {experiment.name}]"
                ),
                "keywords": list(experiment.tags) or None,
            },
            "scenario": {"stack": [_engine(experiment, config, cell)], "load": _load(experiment, cell)},
            "results": {"request_performance": {"aggregate": _aggregate(values)}},
        }
    )
    # After the compaction: the extension says "not measured" as null.
    body["results"]["observability"] = {EXTENSION_KEY: _extension(experiment, config, cell)}
    return body


def _engine(experiment: ExportedExperiment, config: ExportedConfig, cell: ExportedCell) -> dict[str, Any]:
    extra = config.extra_args
    return {
        "metadata": {
            "schema_version": COMPONENT_SCHEMA_VERSION,
            "label": config.name,
            "cfg_id": config.content_hash,
            "description": f"the experiment's {config.role}",
        },
        "standardized": {
            "kind": "inference_engine",
            "tool": "vllm" if cell.tool.startswith("vllm") or config.engine == launch_fields.VLLM else "sglang",
            "tool_version": cell.engine_version or "unknown",
            "role": "replica",
            "replicas": 1,
            "model": {"name": config.model_path},
            "accelerator": {
                "model": experiment.gpu_model or "unknown",
                "count": config.gpu_count,
                "parallelism": {
                    "tp": config.tp_size,
                    "dp": model_checks.int_arg(extra, "--dp-size") or 1,
                    "pp": model_checks.int_arg(extra, "--pp-size") or 1,
                },
            },
        },
        "native": {"args": _flags(config), "envars": dict(config.env)},
    }


def _flags(config: ExportedConfig) -> dict[str, Any]:
    """The server's command line as llm-d writes one: flag -> value, None for a flag without one."""
    positional, words = launch_fields.launch_words(config.engine, config.launch_spec())
    flags: dict[str, Any] = {"model": positional[0]} if positional else {}
    flags.update(zip(words[::2], words[1::2], strict=True))
    args = config.extra_args
    for i, arg in enumerate(args):
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
            flags[name] = value
        elif arg.startswith("--"):
            following = args[i + 1] if i + 1 < len(args) else None
            flags[arg] = None if following is None or following.startswith("--") else following
    return flags


def _load(experiment: ExportedExperiment, cell: ExportedCell) -> dict[str, Any]:
    profile = experiment.profile
    random = profile["dataset"] in RANDOM_DATASETS
    # Random prompts are exactly the profile's lengths; a sampled set's are at most that long.
    distribution = "fixed" if random else "other"
    return {
        "metadata": {"schema_version": COMPONENT_SCHEMA_VERSION, "description": profile["summary"]},
        "standardized": {
            "tool": cell.tool,
            "tool_version": cell.tool_version or "unknown",
            "source": "random" if random else "sampled",
            "input_seq_len": {"distribution": distribution, "value": profile["input_len"]},
            "output_seq_len": {"distribution": distribution, "value": profile["output_len"]},
            "concurrency": cell.concurrency,
        },
        "native": {
            "args": {
                "dataset": profile["dataset"],
                "num_prompts": profile["num_prompts"],
                "input_len": profile["input_len"],
                "output_len": profile["output_len"],
                "max_concurrency": cell.concurrency,
                "warmup_requests": profile["warmup_requests"],
                "seed": profile["seed"],
                "temperature": profile["temperature"],
                "top_p": profile["top_p"],
            }
        },
    }


def _aggregate(values: dict[str, Any]) -> dict[str, Any]:
    latency = {}
    for field, (metric, units) in LATENCIES.items():
        mean = finite(values.get(f"mean_{metric}"))
        if mean is not None:
            latency[field] = {
                "units": units,
                "mean": mean,
                "p50": finite(values.get(f"median_{metric}")),
                "p90": finite(values.get(f"p90_{metric}")),
                "p99": finite(values.get(f"p99_{metric}")),
            }
    throughput = {}
    for field, (column, units) in THROUGHPUTS.items():
        mean = finite(values.get(column))
        if mean is not None:
            throughput[field] = {"units": units, "mean": mean}
    return {
        "requests": {"total": values["completed"] + values["failed"], "failures": values["failed"]},
        "latency": latency,
        "throughput": throughput,
    }


def _extension(experiment: ExportedExperiment, config: ExportedConfig, cell: ExportedCell) -> dict[str, Any]:
    row = experiment.row(config.name, cell.concurrency)
    return {
        "version": EXTENSION_VERSION,
        "cell": {
            "experiment": experiment.id,
            "config": config.name,
            "role": config.role,
            "run": cell.run,
            "launch": cell.launch,
            "pass": cell.pass_index,
            "concurrency": cell.concurrency,
        },
        "speculative": dict(config.speculative) or None,
        "acceptance": {
            **{name: finite(cell.values.get(name)) for name in ACCEPTANCE},
            "position_acceptance": cell.values.get("position_acceptance"),
        },
        "comparison": None
        if row is None
        else {"baseline": experiment.baseline, **{name: finite(row.get(name)) for name in COMPARISON}},
    }


def _duration(seconds: float | None) -> str | None:
    """ISO 8601, as the schema's `run.time.duration` asks: PT20.48S."""
    return None if seconds is None else "PT" + f"{seconds:.3f}".rstrip("0").rstrip(".") + "S"


def _compact(value: Any) -> Any:
    """`value` without its None members: the schema's optional fields are left out rather than null."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value
