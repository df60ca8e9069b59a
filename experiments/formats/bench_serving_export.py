"""An experiment as SGLang `bench_serving` result lines (pure): one JSON line per benchmark cell, as
`python -m sglang.bench_serving --output-file F` appends one per run, so that any tool that reads those files (and
specdash's own import, `formats/imported_results/bench_serving.py`) reads the cells.

The keys are bench_serving's, from the `result` dict of `benchmark()` in sgl-project/sglang
`python/sglang/bench_serving.py` (0.5.x: `tag`, `backend`, `dataset_name`, `request_rate`, `max_concurrency`,
`sharegpt_output_len`, `random_input_len`, `random_output_len`, `random_range_ratio`, `server_info`, `duration`,
`completed`, `total_input_tokens`, `total_output_tokens`, the four throughputs, `{mean,median,p90,p99}_{e2e_latency,
ttft,tpot,itl}_ms`, `accept_length`), with these readings:

- `server_info` is what SGLang's /get_server_info answers: the config's model, tp and speculative settings (what the
  import files the cell under), the settings the run's server reported (exported_experiment.SERVER_ARGS only) and,
  where measured, `internal_states[0].avg_spec_accept_length`.
- `accept_length` is bench_serving's own figure, the server's window (`server_accept_length`), null where not
  measured; specdash's other acceptance figures, and where the line comes from, are under the key `specdash`
  (EXTENSION_KEY), which bench_serving never writes.
- `request_rate` is Infinity, as bench_serving writes it for requests sent as fast as the concurrency allows (what
  specdash's client does); the token totals are the throughputs times the duration, as bench_serving defines them.
- Only what specdash measured is written: no std or p95 latencies, no per-request arrays (`--output-details`).
"""

from __future__ import annotations

import json
from typing import Any

from .exported_experiment import ExportedCell, ExportedExperiment, finite

EXTENSION_KEY = "specdash"
LATENCIES = ("e2e_latency", "ttft", "tpot", "itl")
STATS = ("mean", "median", "p90", "p99")
# specdash's acceptance figures (analysis/acceptance.DEFINITIONS) beside bench_serving's, and what else a cell holds.
EXTENSION_FIELDS = (
    "accept_length",
    "pooled_accept_length",
    "mean_request_accept_length",
    "steady_state_accept_length",
    "steady_state_output_throughput",
    "steady_state_window_s",
    "server_mean_e2e_latency_ms",
    "failed",
)
RANDOM_DATASETS = ("random", "random-ids")


def bench_serving_lines(experiment: ExportedExperiment) -> str:
    """The JSONL text: one line per cell, in the report's order (by run, pass and concurrency)."""
    return "".join(json.dumps(line(experiment, cell)) + "\n" for cell in experiment.cells)


def line(experiment: ExportedExperiment, cell: ExportedCell) -> dict[str, Any]:
    values, profile = cell.values, experiment.profile
    duration = values["duration_s"]
    random = profile["dataset"] in RANDOM_DATASETS
    out: dict[str, Any] = {
        "tag": None,
        # specdash's client speaks SGLang's native API, as bench_serving's `sglang` backend does.
        "backend": "sglang" if cell.tool == "specdash" else None,
        "dataset_name": profile["dataset"],
        "request_rate": float("inf"),
        "max_concurrency": cell.concurrency,
        "sharegpt_output_len": None,
        "random_input_len": profile["input_len"],
        "random_output_len": profile["output_len"],
        # Random prompts are exactly that long; a sampled set's are at most that long.
        "random_range_ratio": 1.0 if random else None,
        "server_info": _server_info(experiment, cell),
        "duration": duration,
        "completed": values["completed"],
        "total_input_tokens": _tokens(values["input_throughput"], duration),
        "total_output_tokens": _tokens(values["output_throughput"], duration),
        "request_throughput": values["request_throughput"],
        "input_throughput": values["input_throughput"],
        "output_throughput": values["output_throughput"],
        "total_throughput": values["total_throughput"],
    }
    for latency in LATENCIES:
        for stat in STATS:
            out[f"{stat}_{latency}_ms"] = finite(values.get(f"{stat}_{latency}_ms"))
    out["accept_length"] = finite(values.get("server_accept_length"))
    out[EXTENSION_KEY] = {
        "experiment": experiment.id,
        "config": cell.config,
        "config_hash": experiment.config(cell.config).content_hash,
        "run": cell.run,
        "launch": cell.launch,
        "pass": cell.pass_index,
        "tool": " ".join(filter(None, (cell.tool, cell.tool_version))),
        **{name: finite(values.get(name)) for name in EXTENSION_FIELDS},
    }
    return {key: finite(value) if key != "request_rate" else value for key, value in out.items()}


def _tokens(rate: float | None, duration: float) -> int | None:
    """A cell's tokens, as bench_serving's throughput is its tokens over the duration."""
    tokens = finite((rate or 0.0) * duration)
    return None if tokens is None else round(tokens)


def _server_info(experiment: ExportedExperiment, cell: ExportedCell) -> dict[str, Any]:
    config = experiment.config(cell.config)
    info: dict[str, Any] = {
        **cell.server_args,
        "model_path": config.model_path,
        "tp_size": config.tp_size,
        # SGLang reports None where a server does not speculate.
        "speculative_algorithm": config.speculative.get("speculative_algorithm") or None,
    }
    if config.served_model_name:
        info["served_model_name"] = config.served_model_name
    for name, value in config.speculative.items():
        info[name] = value
    window = finite(cell.values.get("server_accept_length"))
    if window is not None:
        info["internal_states"] = [{"avg_spec_accept_length": window}]
    return info
