"""An experiment as runs of the experiment trackers teams mirror results to (pure): MLflow and Weights & Biases.

One tracker run per config, its figures keyed by concurrency: the concurrency is the axis a reader compares configs
along, and each tracker has one for it (MLflow's metric `step`, W&B's history step), so a config's throughput,
latency and speedup draw as curves over concurrency, and configs compare run against run. The figures are the
report's own (reads/reports.py): per concurrency the mean over every pass and launch with its 95% interval, the
latency table's means, the token-weighted accept length, and for a candidate the comparison's speedup and verdict.

- MLflow: the bodies of `POST /api/2.0/mlflow/runs/log-batch` (metrics `{key, value, timestamp, step}`, params and
  tags `{key, value}`), within its request limits (at most 1000 metrics, 100 params and 100 tags, 1000 items in
  all, per request: a run's figures are split over as many bodies as that takes). Give each body the `run_id` of
  the run `runs/create` made. Params carry the config and the profile; tags the experiment, the role
  (`mlflow.runName` names the run) and each verdict, since metrics are numbers only.
- W&B: per run what `wandb.init(name=, group=, job_type=, tags=, config=)` takes, `summary` for
  `run.summary.update` (keys `<figure>/c<concurrency>`), and `history`, one row per concurrency for
  `run.log(row, step=row["concurrency"])`, ascending as W&B's steps must be.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from .exported_experiment import ExportedConfig, ExportedExperiment, finite

MAX_METRICS = 1000  # MLflow's limits on one log-batch request
MAX_PARAMS = 100
MAX_TAGS = 100
MAX_ITEMS = 1000
PARAM_MAX = 500  # what every MLflow version stores (newer ones take 6000 characters)
TAG_MAX = 5000
LATENCY_FIGURES = (
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "mean_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "server_mean_e2e_latency_ms",
)
PROFILE_PARAMS = (
    "dataset",
    "input_len",
    "output_len",
    "num_prompts",
    "passes",
    "launches",
    "seed",
    "temperature",
    "top_p",
    "warmup_requests",
)


def figures(experiment: ExportedExperiment, config: ExportedConfig) -> dict[int, dict[str, Any]]:
    """Per concurrency measured, the config's figures from the report, by name (None where it has none)."""
    by_level: dict[int, dict[str, Any]] = {}
    for level, mean, low, high in experiment.throughput.get(config.name, []):
        cell = by_level.setdefault(level, {})
        cell.update(output_throughput=mean, output_throughput_ci_low=low, output_throughput_ci_high=high)
    for row in experiment.latency:
        if row["config"] == config.name:
            cell = by_level.setdefault(row["concurrency"], {})
            cell["passes"] = row["n"]
            cell.update((name, row.get(name)) for name in LATENCY_FIGURES)
    for level, mean, low, high in experiment.accept_length.get(config.name, []):
        cell = by_level.setdefault(level, {})
        cell.update(accept_length=mean, accept_length_ci_low=low, accept_length_ci_high=high)
    for row in experiment.comparison:
        if row["candidate"] == config.name:
            cell = by_level.setdefault(row["concurrency"], {})
            cell.update(
                baseline_output_throughput=row["baseline_tok_s"],
                speedup=row["speedup"],
                speedup_ci_low=row["ci_low"],
                speedup_ci_high=row["ci_high"],
                verdict=row["verdict"],
            )
    return {
        level: {name: finite(value) for name, value in by_level[level].items() if finite(value) is not None}
        for level in sorted(by_level)
    }


def mlflow_runs(experiment: ExportedExperiment) -> dict[str, Any]:
    timestamp = _millis(experiment.ended_at or experiment.created_at)
    runs = []
    for config in experiment.configs:
        metrics, verdicts = [], []
        for level, cell in figures(experiment, config).items():
            for name, value in cell.items():
                if name == "verdict":
                    verdicts.append(_pair(f"specdash.verdict.c{level}", value, TAG_MAX))
                elif isinstance(value, int | float) and not isinstance(value, bool):
                    metrics.append({"key": name, "value": float(value), "timestamp": timestamp, "step": level})
        tags = [
            _pair("mlflow.runName", config.name, TAG_MAX),
            _pair("specdash.experiment_id", experiment.id, TAG_MAX),
            _pair("specdash.experiment", experiment.name, TAG_MAX),
            _pair("specdash.role", config.role, TAG_MAX),
            _pair("specdash.baseline", experiment.baseline, TAG_MAX),
            _pair("specdash.status", experiment.status, TAG_MAX),
            _pair("specdash.host", experiment.host, TAG_MAX),
            *([_pair("specdash.tags", ", ".join(experiment.tags), TAG_MAX)] if experiment.tags else []),
            *verdicts,
        ]
        params = [_pair(name, value, PARAM_MAX) for name, value in _config_params(experiment, config).items()]
        runs.append({"run_name": config.name, "log_batches": list(_batches(metrics, params, tags))})
    return {
        "format": "mlflow runs/log-batch",
        "experiment_name": f"specdash/{experiment.name}",
        "runs": runs,
    }


def wandb_runs(experiment: ExportedExperiment) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for config in experiment.configs:
        by_level = figures(experiment, config)
        settings: dict[str, Any] = {
            **_config_params(experiment, config),
            "extra_args": list(config.extra_args),
            "profile": {name: experiment.profile[name] for name in PROFILE_PARAMS},
            "concurrency": list(experiment.profile["concurrency"]),
        }
        runs.append(
            {
                "name": config.name,
                "group": f"specdash experiment {experiment.id}",
                "job_type": config.role,
                "tags": list(experiment.tags),
                "notes": f"{config.role} of specdash experiment {experiment.id}: {experiment.name}",
                "config": settings,
                "summary": {
                    f"{name}/c{level}": value for level, cell in by_level.items() for name, value in cell.items()
                },
                "history": [{"concurrency": level, **cell} for level, cell in by_level.items()],
            }
        )
    return {"format": "wandb runs", "project": "specdash", "experiment": experiment.id, "runs": runs}


def _config_params(experiment: ExportedExperiment, config: ExportedConfig) -> dict[str, Any]:
    """The config and the profile as flat params; what is not set is left out (a param is never empty)."""
    params: dict[str, Any] = {
        "config_hash": config.content_hash,
        "role": config.role,
        "model_path": config.model_path,
        "served_model_name": config.served_model_name,
        "tp_size": config.tp_size,
        **config.speculative,
        "extra_args": " ".join(config.extra_args),
        "host": experiment.host,
        "gpu_model": experiment.gpu_model,
        **{f"profile.{name}": experiment.profile[name] for name in PROFILE_PARAMS},
        "profile.concurrency": ", ".join(str(c) for c in experiment.profile["concurrency"]),
    }
    return {name: value for name, value in params.items() if value not in (None, "")}


def _pair(key: str, value: Any, limit: int) -> dict[str, str]:
    return {"key": key, "value": str(value)[:limit]}


def _batches(metrics: list[dict], params: list[dict], tags: list[dict]) -> Iterator[dict[str, list[dict]]]:
    """log-batch bodies holding every item, each within MLflow's limits; at least one."""
    metrics, params, tags = list(metrics), list(params), list(tags)
    while True:
        batch_params, params = params[:MAX_PARAMS], params[MAX_PARAMS:]
        batch_tags, tags = tags[:MAX_TAGS], tags[MAX_TAGS:]
        room = min(MAX_METRICS, MAX_ITEMS - len(batch_params) - len(batch_tags))
        batch_metrics, metrics = metrics[:room], metrics[room:]
        yield {"metrics": batch_metrics, "params": batch_params, "tags": batch_tags}
        if not (metrics or params or tags):
            return


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
