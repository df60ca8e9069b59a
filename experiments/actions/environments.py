"""Recording what a run ran on: its host's fingerprint, its server processes' environment, its GPUs' telemetry, and
the server's metrics during its benchmark cells."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..analysis.telemetry import GpuReading, ServerMetricReading
from ..models import GpuSample, Run, RunEnvironment, ServerMetricSample


@transaction.atomic
def do_record_fingerprint(
    run: Run, fingerprint: dict[str, Any], error: str, launch_env: dict[str, str], host_env_names: Iterable[str]
) -> RunEnvironment:
    environment, _ = RunEnvironment.objects.update_or_create(
        run=run,
        defaults={
            "fingerprint": fingerprint,
            "read_error": error[:4000],
            "read_at": timezone.now(),
            "launch_env": launch_env,
            "host_env_names": sorted(host_env_names),
        },
    )
    return environment


@transaction.atomic
def do_record_process_env(run: Run, processes: list[dict[str, Any]]) -> None:
    environment, _ = RunEnvironment.objects.get_or_create(run=run)
    environment.processes = processes
    environment.processes_read_at = timezone.now()
    environment.save(update_fields=["processes", "processes_read_at"])


def do_add_gpu_samples(run: Run, readings: list[GpuReading]) -> None:
    """Store a batch of telemetry readings, each at the time the worker read it."""
    GpuSample.objects.bulk_create(
        [GpuSample(run=run, at=datetime.fromtimestamp(r.t, UTC), **r.stored_fields()) for r in readings]
    )


@dataclass(frozen=True)
class StoredServerMetrics:
    """Where a batch of samples went: the id of the run's newest sample before it (0: none), and the batch's ids.
    A live page that has every sample up to `after` has missed nothing before this batch."""

    after: int
    ids: list[int]


@transaction.atomic
def do_add_server_metric_samples(run: Run, readings: list[ServerMetricReading]) -> StoredServerMetrics:
    """Store the server's gauges sampled during one benchmark cell, each at its time on the worker's clock."""
    after = ServerMetricSample.objects.newest_id(run.pk)
    created = ServerMetricSample.objects.bulk_create(
        [ServerMetricSample(run=run, at=datetime.fromtimestamp(r.t, UTC), **r.stored_fields()) for r in readings]
    )
    return StoredServerMetrics(after=after, ids=[sample.pk for sample in created])
