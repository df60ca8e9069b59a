"""The reads behind the environment diffs and the GPU telemetry: a run's snapshot (fingerprint and server
environment), the diff of two runs or two experiments, the last run before a given one in its history series (what a
regression flag compares its first run at the new level with), and a run's GPU and server samples beside its benchmark
cells. The words and judgements come from the pure `analysis.environment` and `analysis.telemetry`."""

from __future__ import annotations

from typing import Any

from experiments.analysis import telemetry
from experiments.analysis.environment import Snapshot, changes, summary
from experiments.analysis.telemetry import READING_FIELDS, SERVER_METRIC_FIELDS, GpuReading, ServerMetricReading
from experiments.models import (
    Experiment,
    GpuSample,
    GpuSampleQuerySet,
    Measurement,
    Run,
    RunEnvironment,
    ServerMetricSample,
)
from experiments.rules import secrets


def _environment(run: Run) -> RunEnvironment | None:
    try:
        return run.environment  # type: ignore[attr-defined]
    except RunEnvironment.DoesNotExist:
        return None


def snapshot(run: Run, *, source: str = "server", environment: RunEnvironment | None = None) -> Snapshot:
    """`source`: "server" (what the server processes received, else the launch's), or "launch" (what specdash
    exported: the host's defaults under the config's env; the config's env alone for a run older than both).
    `environment`: the run's, when the caller has read it already."""
    environment = environment or _environment(run)
    env: dict[str, str] | None = None
    if environment is not None and source == "server":
        env = environment.server_env
    if env is None:
        env = environment.launch_env if environment is not None and environment.read_at else dict(run.config.env)
    fingerprint = environment.fingerprint if environment is not None else {}
    return Snapshot(fingerprint, secrets.shown(env), f"run {run.pk}")


def diff_runs(before: Run, after: Run) -> dict[str, Any]:
    """The environment diff from `before` to `after`, with the words and each change (the API's shape)."""
    environments = _environment(before), _environment(after)
    both_read = all(e is not None and e.server_env is not None for e in environments)
    # Compare like with like: the processes' environment includes what the host's login sets, the launch's does not.
    source = "server" if both_read else "launch"
    a = snapshot(before, source=source, environment=environments[0])
    b = snapshot(after, source=source, environment=environments[1])
    return {
        "before": before.pk,
        "after": after.pk,
        "env_source": source,
        "summary": summary(a, b),
        "changes": [c.as_json() for c in changes(a, b)],
    }


def representative_run(experiment: Experiment) -> Run | None:
    """The run that stands for an experiment's environment: its first baseline run that was fingerprinted, else its
    first fingerprinted run, else its first run."""
    runs = list(experiment.run_set.select_related("config", "environment").order_by("sequence"))
    read = [r for r in runs if _environment(r) is not None and _environment(r).read_at]  # type: ignore[union-attr]
    baseline = [r for r in read if r.config_id == experiment.baseline_id]
    chosen = baseline or read or runs
    return chosen[0] if chosen else None


def diff_experiments(before: Experiment, after: Experiment) -> dict[str, Any] | None:
    a, b = representative_run(before), representative_run(after)
    if a is None or b is None:
        return None
    return {**diff_runs(a, b), "before_experiment": before.pk, "after_experiment": after.pk}


def last_run_before(run: Run) -> Run | None:
    """The last succeeded run of `run`'s history series (host, config content, profile) that finished before it."""
    when = run.finished_at or run.created_at
    return (
        Run.objects.filter(
            host_id=run.host_id,
            config__content_hash=run.config.content_hash,
            experiment__profile__series_key=run.experiment.profile.series_key,
            state=Run.State.SUCCEEDED,
            finished_at__lt=when,
        )
        .exclude(pk=run.pk)
        .select_related("config")
        .order_by("-finished_at", "-pk")
        .first()
    )


def diff_before_change(run: Run) -> dict[str, Any] | None:
    """What changed in the environment between the last run before `run` in its series and `run` (a regression
    flag's first run at the new level); None when nothing came before it."""
    previous = last_run_before(run)
    return diff_runs(previous, run) if previous is not None else None


# ---- GPU telemetry --------------------------------------------------------------------------------------------

SAMPLE_FIELDS = ("run_id", "at", *READING_FIELDS)
# A cell's measurement is stored a moment after its client finished (the server's own figures are read first).
CELL_END_SLACK_S = 1.0


def _samples_by_run(runs: GpuSampleQuerySet) -> dict[int, list[GpuReading]]:
    by_run: dict[int, list[GpuReading]] = {}
    for run_id, at, *values in runs.order_by("at", "gpu").values_list(*SAMPLE_FIELDS).iterator():
        by_run.setdefault(run_id, []).append(
            GpuReading(t=at.timestamp(), **dict(zip(READING_FIELDS, values, strict=True)))
        )
    return by_run


def _cells_by_run(measurements: Any) -> dict[int, list[tuple[float, float, str]]]:
    by_run: dict[int, list[tuple[float, float, str]]] = {}
    for run_id, created, duration, concurrency, pass_index in measurements.values_list(
        "run_id", "created_at", "duration_s", "concurrency", "pass_index"
    ):
        end = created.timestamp()
        start = end - CELL_END_SLACK_S - max(duration, 0)
        by_run.setdefault(run_id, []).append((start, end, f"c={concurrency} p{pass_index + 1}"))
    return by_run


def run_telemetry(run: Run) -> tuple[list[GpuReading], list[tuple[float, float, str]], dict[str, Any]]:
    """(samples, benchmark cells as (start, end, label), summary) of one run."""
    samples = _samples_by_run(GpuSample.objects.filter(run=run)).get(run.pk, [])
    cells = _cells_by_run(Measurement.objects.filter(run=run)).get(run.pk, [])
    return samples, cells, telemetry.summary(samples, [(a, b) for a, b, _ in cells])


def run_server_metrics(run: Run) -> list[ServerMetricReading]:
    """The server's gauges sampled during the run's benchmark cells, oldest first, on the cells' clock."""
    rows = ServerMetricSample.objects.of_run(run).values_list("at", *SERVER_METRIC_FIELDS).iterator()
    return [_server_metric_reading(at, values) for at, *values in rows]


def server_metrics_after(
    run_id: int, after: int, limit: int | None = None
) -> tuple[list[int], list[ServerMetricReading]]:
    """(ids, readings) of the run's samples stored after the sample `after` (0: all), in the order they were
    stored, at most `limit`: what a live page that has every sample up to `after` lacks."""
    rows = ServerMetricSample.objects.filter(run_id=run_id, id__gt=after).order_by("id")
    values = list((rows[:limit] if limit is not None else rows).values_list("id", "at", *SERVER_METRIC_FIELDS))
    return [sample_id for sample_id, *_ in values], [_server_metric_reading(at, rest) for _, at, *rest in values]


def _server_metric_reading(at: Any, values: Any) -> ServerMetricReading:
    return ServerMetricReading(t=at.timestamp(), **dict(zip(SERVER_METRIC_FIELDS, values, strict=True)))


def telemetry_warnings(runs: list[Run]) -> list[str]:
    """The comparison's warnings: a run throttled while it benchmarked, or whose clocks differed from the others'
    (two queries whatever the number of runs)."""
    ids = [r.pk for r in runs]
    samples = _samples_by_run(GpuSample.objects.filter(run_id__in=ids))
    if not samples:
        return []
    cells = _cells_by_run(Measurement.objects.filter(run_id__in=ids))
    summaries = {
        f"Run {r.pk} ({r.config.name})": telemetry.summary(samples[r.pk], [(a, b) for a, b, _ in cells.get(r.pk, [])])
        for r in runs
        if samples.get(r.pk)
    }
    return telemetry.comparison_warnings(summaries)


def reproducibility_warnings(experiment: Experiment, runs: list[Run]) -> dict[str, Any]:
    """What the comparison page warns about beside its numbers: throttled runs or runs at other clocks, the warnings
    the servers logged (with their log lines), and runs whose machine differed from the experiment's first."""
    finished = [r for r in runs if r.state == Run.State.SUCCEEDED]
    warnings = [{"run": r, **w} for r in runs for w in r.warnings or [] if isinstance(w, dict)]
    environments = {e.run_id: e for e in RunEnvironment.objects.filter(run__in=runs).exclude(fingerprint={})}
    baseline = [r for r in runs if r.pk in environments and r.config_id == experiment.baseline_id]
    candidates = baseline or [r for r in runs if r.pk in environments]
    machine = []
    if candidates:
        reference = candidates[0]
        base = snapshot(reference, source="launch", environment=environments[reference.pk])
        for run in runs:
            environment = environments.get(run.pk)
            if run.pk == reference.pk or environment is None:
                continue
            found = [
                c for c in changes(base, snapshot(run, source="launch", environment=environment)) if c.kind != "env"
            ]
            if found:
                machine.append({"run": run, "against": reference, "text": ", ".join(c.describe() for c in found)})
    telemetry = telemetry_warnings(finished)
    # One line per kind on the page (the details folded under it): the servers' warnings by their kind.
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for warning in warnings:
        by_kind.setdefault(str(warning.get("kind") or "other"), []).append(warning)
    return {
        "telemetry": telemetry,
        "server": warnings,
        "server_kinds": sorted(by_kind.items()),
        "machine": machine,
        "count": len(telemetry) + len(warnings) + len(machine),
    }
