"""An experiment as the export formats for other tools read it (pure): its configs, the cells its comparison reads,
and the figures of its one report. serializers/exports.py makes it from `reads.reports.ExperimentReport`; each
format (llmd_report, bench_serving_export, tracker_runs) reads this value only, so no format computes a statistic
the report does not hold, and none can reach a secret: a config's environment arrives as its masks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from experiments.rules import launch_fields

# What a server told about itself (/get_server_info, a run's effective args) that an export may repeat: settings that
# shape speed. Allowed by name: a server reports its `api_key` too, and an imported file may carry anything.
SERVER_ARGS = (
    "tokenizer_path",
    "served_model_name",
    "dp_size",
    "pp_size",
    "ep_size",
    "mem_fraction_static",
    "max_running_requests",
    "max_total_tokens",
    "context_length",
    "chunked_prefill_size",
    "cuda_graph_max_bs",
    "disable_cuda_graph",
    "disable_overlap_schedule",
    "disable_radix_cache",
    "attention_backend",
    "sampling_backend",
    "schedule_policy",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "page_size",
    "enable_torch_compile",
    "speculative_attention_mode",
    "version",
)
TEXT_MAX = 512  # a server arg's text, bounded


@dataclass(frozen=True)
class ExportedConfig:
    name: str
    content_hash: str
    role: str  # "baseline" or "candidate"
    model_path: str
    served_model_name: str
    tp_size: int
    gpu_count: int
    # The speculative settings that are set, by field name (launch_fields.speculative_settings); {} for a baseline.
    speculative: dict[str, Any]
    extra_args: list[str]
    env: dict[str, str]  # NAME -> value, each secret as its mask (rules/secrets.py), never its value
    engine: str = launch_fields.SGLANG

    def launch_spec(self) -> dict[str, Any]:
        """Its launch fields as `ServerConfig.launch_spec()` holds them (what `launch_fields` reads)."""
        columns = set(launch_fields.column_names())
        return {
            "model_path": self.model_path,
            "served_model_name": self.served_model_name,
            "tp_size": self.tp_size,
            **{name: value for name, value in self.speculative.items() if name in columns},
            "engine_options": {name: value for name, value in self.speculative.items() if name not in columns},
        }


@dataclass(frozen=True)
class ExportedCell:
    """One benchmark cell the comparison reads (a usable pass of a succeeded run at one concurrency), as measured."""

    config: str
    run: int
    launch: int
    values: dict[str, Any]  # the measurement's columns (reads.reports.MEASUREMENT_COLUMNS)
    server_args: dict[str, Any]  # what the run's server reported about itself, SERVER_ARGS only
    tool: str  # what measured it: "specdash", or the imported file's tool ("sglang bench_serving")
    tool_version: str  # "" where unknown

    @property
    def concurrency(self) -> int:
        return int(self.values["concurrency"])

    @property
    def pass_index(self) -> int:
        return int(self.values["pass_index"])

    @property
    def engine_version(self) -> str:
        version = self.server_args.get("version")
        return version if isinstance(version, str) else ""


@dataclass(frozen=True)
class ExportedExperiment:
    id: int
    name: str
    status: str
    created_at: datetime
    ended_at: datetime | None  # when its last run ended; None while none has
    owner: str | None
    tags: list[str]
    host: str
    gpu_model: str  # "" where the host lists no GPU
    baseline: str
    profile: dict[str, Any]  # the benchmark profile's fields, `summary` its one line
    configs: list[ExportedConfig]
    cells: list[ExportedCell]
    # The one comparison and the report's own figures, as the API gives them: the comparison rows
    # (serializers/comparisons.py), per config the (concurrency, mean, low, high) of output tok/s and of the
    # token-weighted accept length, and the latency table (per config and concurrency, the mean over passes).
    comparison: list[dict[str, Any]] = field(default_factory=list)
    throughput: dict[str, list[tuple[int, float, float | None, float | None]]] = field(default_factory=dict)
    accept_length: dict[str, list[tuple[int, float, float | None, float | None]]] = field(default_factory=dict)
    latency: list[dict[str, Any]] = field(default_factory=list)

    def config(self, name: str) -> ExportedConfig:
        return next(c for c in self.configs if c.name == name)

    @property
    def key(self) -> str:
        """What names this experiment among every specdash's: ids repeat across installations, creation times
        rarely with them."""
        return f"specdash/experiment/{self.id}/{self.created_at.isoformat()}"

    def row(self, candidate: str, concurrency: int) -> dict[str, Any] | None:
        """The comparison's row of `candidate` at `concurrency` (None for the baseline, or a cell not compared)."""
        return next(
            (r for r in self.comparison if r["candidate"] == candidate and r["concurrency"] == concurrency), None
        )


def finite(value: Any) -> Any:
    """`value`, with a NaN or an infinity (which strict JSON has not) as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def server_args(reported: Any) -> dict[str, Any]:
    """The SERVER_ARGS of what a server reported, each a plain scalar (a text bounded), nothing else."""
    if not isinstance(reported, dict):
        return {}
    out: dict[str, Any] = {}
    for name in SERVER_ARGS:
        value = reported.get(name)
        if isinstance(value, str):
            out[name] = value[:TEXT_MAX]
        elif value is None or isinstance(value, bool | int):
            if name in reported:
                out[name] = value
        elif isinstance(value, float) and math.isfinite(value):
            out[name] = value
    return out
