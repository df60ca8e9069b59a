"""Small factories for test rows: sensible defaults, every field overridable by keyword."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from experiments.actions.confirmations import do_check_history
from experiments.forms import ExperimentSubmission, apply_profile_defaults, config_form_data, profile_form_data
from experiments.models import (
    BenchmarkProfile,
    Candidate,
    Experiment,
    Host,
    LogChunk,
    Measurement,
    Run,
    ServerConfig,
    SshKey,
)

MODELS = "/models"
_seq = itertools.count(1)


def make_ssh_key(**fields: Any) -> SshKey:
    """A registered key; its public key is a real ed25519 key's (the file does not exist: no worker reads it)."""
    defaults: dict[str, Any] = {
        "name": f"key-{next(_seq)}",
        "file_name": "id_ed25519",
        "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
    }
    return SshKey.objects.create(**{**defaults, **fields})


def make_host(**fields: Any) -> Host:
    n = next(_seq)
    defaults: dict[str, Any] = {
        "name": f"host-{n}",
        "address": "127.0.0.1",
        "username": "gpu",
        "models_root": MODELS,
        "gpu_inventory": [{"index": i, "name": "NVIDIA H200"} for i in range(8)],
    }
    return Host.objects.create(**{**defaults, **fields})


def make_config(**fields: Any) -> ServerConfig:
    defaults: dict[str, Any] = {
        "name": f"baseline-{next(_seq)}",
        "model_path": f"{MODELS}/kimi-k2.5-sim",
        "tp_size": 8,
    }
    return ServerConfig.objects.create(**{**defaults, **fields})


def make_eagle_config(steps: int = 2, **fields: Any) -> ServerConfig:
    defaults: dict[str, Any] = {
        "name": f"eagle3-{steps}step-{next(_seq)}",
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3",
        "speculative_num_steps": steps,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": steps + 1,
    }
    return make_config(**{**defaults, **fields})


def make_profile(**fields: Any) -> BenchmarkProfile:
    defaults: dict[str, Any] = {"name": f"profile-{next(_seq)}", "concurrency": [1, 4], "num_prompts": 16}
    return BenchmarkProfile.objects.create(**{**defaults, **fields})


def make_experiment(
    *,
    host: Host | None = None,
    baseline: ServerConfig | None = None,
    candidates: list[ServerConfig] | None = None,
    profile: BenchmarkProfile | None = None,
    with_runs: bool = True,
    **fields: Any,
) -> Experiment:
    """An experiment with its candidates and (unless `with_runs=False`) one queued run per config and launch."""
    host = host or make_host()
    baseline = baseline or make_config()
    candidates = [make_eagle_config()] if candidates is None else candidates
    profile = profile or make_profile()
    experiment = Experiment.objects.create(
        **{"name": f"experiment-{next(_seq)}", "host": host, "baseline": baseline, "profile": profile, **fields}
    )
    for position, config in enumerate(candidates):
        Candidate.objects.create(experiment=experiment, config=config, position=position)
    if with_runs:
        configs = [baseline, *candidates]
        for launch in range(profile.launches):
            for config in configs:
                make_run(experiment=experiment, config=config, launch_index=launch)
    return experiment


def make_run(*, experiment: Experiment | None = None, config: ServerConfig | None = None, **fields: Any) -> Run:
    experiment = experiment or make_experiment(with_runs=False)
    config = config or experiment.baseline
    sequence = fields.pop("sequence", None)
    if sequence is None:
        sequence = Run.objects.filter(experiment=experiment).count()
    defaults: dict[str, Any] = {
        "host": experiment.host,
        "timeline": [{"state": Run.State.QUEUED, "at": timezone.now().isoformat()}],
    }
    return Run.objects.create(experiment=experiment, config=config, sequence=sequence, **{**defaults, **fields})


def make_measurement(
    run: Run, *, concurrency: int, output_throughput: float, pass_index: int = 0, **fields: Any
) -> Measurement:
    """A cell of 16 requests over 10 s; `fields` sets any other column (latencies, accept lengths)."""
    return Measurement.objects.create(
        run=run,
        pass_index=pass_index,
        concurrency=concurrency,
        completed=16,
        duration_s=10.0,
        output_throughput=output_throughput,
        total_throughput=output_throughput * 2,
        request_throughput=1.0,
        **fields,
    )


def make_log(run: Run, chunks: list[list[str]]) -> list[str]:
    """Store `chunks` as consecutive LogChunks after the run's stored lines; returns all the run's lines."""
    first = run.log_lines + 1
    for lines in chunks:
        LogChunk.objects.create(run=run, first_line=first, line_count=len(lines), text="\n".join(lines))
        first += len(lines)
    run.log_lines = first - 1
    run.save(update_fields=["log_lines"])
    return [line for chunk in LogChunk.objects.filter(run=run).order_by("first_line") for line in chunk.lines()]


def make_history(
    values: list[float],
    *,
    host: Host | None = None,
    config: ServerConfig | None = None,
    concurrencies: Sequence[int] = (1,),
    start: datetime | None = None,
) -> list[Run]:
    """One finished experiment per value, the same baseline config, host and profile, checked as it lands; at
    concurrency c the run measures value * c (the same step at every level)."""
    host = host or make_host()
    config = config or make_config(name="baseline")
    start = start or timezone.now() - timedelta(days=len(values))
    runs = []
    for i, value in enumerate(values):
        experiment = make_experiment(host=host, baseline=config, candidates=[], profile=make_profile(), with_runs=False)
        run = make_run(experiment=experiment)
        finish_run(run, {c: value * c for c in concurrencies}, at=start + timedelta(hours=i))
        runs.append(run)
    return runs


def finish_run(
    run: Run,
    values: dict[int, float],
    *,
    at: datetime | None = None,
    accept_lengths: dict[int, float] | None = None,
    cell_fields: dict[int, dict[str, Any]] | None = None,
) -> Run:
    """Mark a queued run succeeded with three passes of `values` (concurrency -> tok/s, and each cell's accept
    length from `accept_lengths`, any other column from `cell_fields`, when given), and check its history as the
    worker does."""
    run.state, run.finished_at = Run.State.SUCCEEDED, at or timezone.now()
    run.save(update_fields=["state", "finished_at"])
    for concurrency, value in values.items():
        accept_length = (accept_lengths or {}).get(concurrency)
        for pass_index in range(3):
            make_measurement(
                run,
                concurrency=concurrency,
                output_throughput=value,
                pass_index=pass_index,
                accept_length=accept_length,
                **(cell_fields or {}).get(concurrency, {}),
            )
    do_check_history(run)
    return run


def experiment_payload(host: Host) -> dict[str, Any]:
    """A valid POST /api/experiments body (DESIGN.md's example) for `host`."""
    return {
        "name": "eagle3 2 steps",
        "host": host.name,
        "baseline": {"name": "baseline", "model_path": f"{MODELS}/kimi-k2.5-sim", "tp_size": 8},
        "candidates": [
            {
                "name": "eagle3-2step",
                "model_path": f"{MODELS}/kimi-k2.5-sim",
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3",
                "speculative_num_steps": 2,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 3,
                "tp_size": 8,
                "env": {"NCCL_PROTO": "LL"},
                "extra_args": ["--mem-fraction-static", "0.85"],
                "expect": {
                    "server_args": {"disable_overlap_schedule": False},
                    "log_contains": ["Spec v2 is enabled"],
                    "env_propagated": ["NCCL_PROTO"],
                },
                "log_metrics": {"verify_ms": r"Target verify: (?P<verify_ms>[\d.]+) ms"},
            }
        ],
        "profile": {
            "concurrency": [1, 4],
            "num_prompts": 16,
            "input_len": 128,
            "output_len": 128,
            "seed": 1,
            "passes": 1,
            "launches": 1,
        },
    }


def row_counts() -> dict[str, int]:
    """How many rows an experiment submission may create, per model (to prove nothing was saved)."""
    return {
        model.__name__: model.objects.count() for model in (ServerConfig, BenchmarkProfile, Experiment, Candidate, Run)
    }


# A change to an experiment payload (experiment_payload's shape), for tests of what the submission refuses.
Mutation = Callable[[dict[str, Any]], None]


def submission_of(payload: dict[str, Any]) -> ExperimentSubmission:
    """The submission the API builds from an experiment payload."""
    return ExperimentSubmission(
        {"name": payload["name"], "host": payload["host"]},
        config_form_data(payload["baseline"]),
        [config_form_data(c) for c in payload["candidates"]],
        profile_form_data(apply_profile_defaults(payload["profile"])),
    )


def set_candidate(**fields: Any) -> Mutation:
    return lambda p: p["candidates"][0].update(fields)


def set_baseline(**fields: Any) -> Mutation:
    return lambda p: p["baseline"].update(fields)


def set_profile(**fields: Any) -> Mutation:
    return lambda p: p["profile"].update(fields)


def small_submission(host, launches: int, name: str = "big", **profile: Any) -> dict:
    """The API body of a one-config experiment of `launches` tiny launches on `host` (the quota tests' unit)."""
    return {
        "name": name,
        "host": host.name,
        "baseline": {"name": "baseline", "model_path": f"{host.models_root}/kimi-k2.5-sim", "tp_size": 8},
        "profile": {"concurrency": [1], "num_prompts": 4, "passes": 1, "launches": launches, **profile},
    }


def make_measured_run(
    experiment: Experiment | None = None,
    config: ServerConfig | None = None,
    *,
    load_s: float = 60.0,
    warmup_s: float = 10.0,
    cell_s: float = 30.0,
    after_s: float = 2.0,
    teardown_s: float = 5.0,
    profiled: bool = False,
) -> Run:
    """A run a worker drove to success, each phase taking what is given (each cell `cell_s`) and ending now, its
    phases recorded by the worker's own last step (`do_advance_run(..., measured=True)`)."""
    from experiments.actions.runs import do_advance_run

    experiment = experiment or make_experiment(with_runs=False)
    cells = experiment.profile.benchmark_cells()
    start = timezone.now() - timedelta(seconds=load_s + warmup_s + cell_s * len(cells) + after_s + teardown_s)
    warm, bench = start + timedelta(seconds=load_s), start + timedelta(seconds=load_s + warmup_s)
    steps = [
        (Run.State.QUEUED, start - timedelta(minutes=1)),
        *((state, start) for state in (Run.State.CONNECTING, Run.State.PREFLIGHT, Run.State.LAUNCHING)),
        (Run.State.LOADING, start),
        *((state, warm) for state in (Run.State.WARMING, Run.State.READY, Run.State.VERIFYING)),
        (Run.State.BENCHMARKING, bench),
        (Run.State.TEARDOWN, bench + timedelta(seconds=cell_s * len(cells) + after_s)),
    ]
    run = make_run(
        experiment=experiment,
        config=config,
        state=Run.State.TEARDOWN,
        started_at=start,
        worker="test-worker",
        profile_requested=profiled,
        timeline=[{"state": state, "at": at.isoformat()} for state, at in steps],
    )
    for index, (pass_index, concurrency) in enumerate(cells):
        make_measurement(run, concurrency=concurrency, pass_index=pass_index, output_throughput=100.0,
                         ended_at=bench + timedelta(seconds=cell_s * (index + 1)))  # fmt: skip
    do_advance_run(run, Run.State.SUCCEEDED, measured=True)
    return run
