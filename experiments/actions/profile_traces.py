"""Profiler traces: storing what a run's profiling cell fetched, and queueing a profiled re-run of a run's config."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ..models import Experiment, ProfileTrace, Run
from .audit import Actor
from .experiments import do_create_experiment


@transaction.atomic
def do_record_profile_trace(
    run: Run,
    concurrency: int,
    rank: int,
    *,
    state: str,
    file_name: str = "",
    message: str = "",
    size_bytes: int = 0,
    steps: int = 0,
    summary: dict[str, Any] | None = None,
    trace: bytes | None = None,
) -> ProfileTrace:
    """Store one rank's trace at one concurrency (again after a re-attach: the same row is replaced)."""
    record, _ = ProfileTrace.objects.update_or_create(
        run=run,
        concurrency=concurrency,
        rank=rank,
        defaults=dict(
            state=state,
            file_name=file_name[:255],
            message=message[:2000],
            size_bytes=size_bytes,
            steps=steps,
            summary=summary or {},
            trace=trace,
        ),
    )
    return record


def do_profile_run(run: Run, *, actor: Actor) -> Experiment:
    """Queue a profiled launch of `run`'s config on its host under its benchmark profile, as an experiment of its own
    (the config alone, as a baseline): its measured cells are a normal launch's, and the experiment `run` belongs to
    keeps its interleaved schedule and comparison. Raises QuotaExceeded past the actor's or the host's quotas."""
    source = run.experiment
    return do_create_experiment(
        actor=actor,
        name=f"Profile of run {run.pk} ({run.config.name})"[:200],
        host=run.host,
        baseline=run.config,
        candidates=[],
        profile=source.profile,
        profile_traces=True,
    )
