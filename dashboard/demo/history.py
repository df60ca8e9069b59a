"""The demo's seeded history: two weeks of a nightly baseline on the simulated host whose throughput dropped from
88.8 to 82.2 tok/s four nights ago. Each result goes through the history check as it arrives, exactly as a
worker's would, so the review queue holds the flag it raised, with the suspicion and the confirming run before it.

The results are written, not measured (two weeks of launches would take the demo hours); the experiment's name
says so. Its profile is the demo's own, so the live demo experiment's runs start no other series in it.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from django.db import transaction

from experiments.actions.audit import Actor
from experiments.actions.confirmations import do_check_history
from experiments.actions.experiments import do_create_experiment
from experiments.forms import ExperimentSubmission
from experiments.models import Experiment, Host, Measurement, Run

NAME = "nightly baseline (seeded history of the demo)"
NIGHTS = 14
DROP_AFTER = 10  # nights at the old level; the driver update came before night 11
LEVELS = {1: 88.8, 4: 302.0}  # tok/s at each concurrency before the drop
DROP = 82.2 / 88.8
NOISE = 0.004
PASSES = 3
MAX_CONFIRMATIONS = 8


def seed_drift_history(host: Host, baseline: dict, profile: dict, user) -> Experiment | None:
    """Seed the history once per database (None when an earlier demo did). `baseline` and `profile` are the demo
    experiment's form values; the profile gets other lengths, so its history is a series of its own."""
    if Experiment.objects.filter(host=host, name=NAME).exists():
        return None
    profile = {
        **profile,
        "concurrency_text": ", ".join(str(level) for level in LEVELS),
        "num_prompts": 16,
        "input_len": 256,
        "output_len": 256,
        "seed": 7,
        "passes": PASSES,
        "launches": 1,
    }
    submission = ExperimentSubmission({"name": NAME, "host": host.name}, baseline, [], profile)
    if not submission.is_valid():
        raise ValueError(f"the seeded history's experiment is invalid: {submission.errors}")
    noise = random.Random(7)
    nightly = datetime.now(UTC).replace(hour=2, minute=0, second=0, microsecond=0) - timedelta(days=NIGHTS)
    with transaction.atomic():
        experiment = do_create_experiment(actor=Actor.command(user), **submission.experiment_fields())
        first = experiment.run_set.get()
        for night in range(NIGHTS):
            at = nightly + timedelta(days=night)
            run = first if night == 0 else _queued_run(experiment, first)
            level = 1.0 if night < DROP_AFTER else DROP
            _finish(run, level, noise, at=at)
            # A suspected change gets its confirming launch the same night, on the same host.
            for _ in range(MAX_CONFIRMATIONS):
                queued = list(experiment.run_set.filter(state=Run.State.QUEUED).order_by("sequence"))
                if not queued:
                    break
                for confirming in queued:
                    at += timedelta(minutes=30)
                    _finish(confirming, level, noise, at=at)
    return experiment


def _queued_run(experiment: Experiment, first: Run) -> Run:
    sequence = experiment.run_set.count()
    return Run.objects.create(
        experiment=experiment,
        config=first.config,
        host=first.host,
        sequence=sequence,
        launch_index=sequence,
        timeline=first.timeline,
    )


def _finish(run: Run, level: float, noise: random.Random, *, at: datetime) -> None:
    """Store the run as a worker would have: succeeded at `at` with its passes measured, then checked."""
    run.state, run.started_at, run.finished_at = Run.State.SUCCEEDED, at - timedelta(minutes=20), at
    run.timeline = [*run.timeline, {"state": Run.State.SUCCEEDED, "at": at.isoformat()}]
    run.save(update_fields=["state", "started_at", "finished_at", "timeline"])
    for concurrency, base in LEVELS.items():
        for pass_index in range(PASSES):
            tok_s = base * level * (1 + noise.gauss(0, NOISE))
            Measurement.objects.create(
                run=run,
                pass_index=pass_index,
                concurrency=concurrency,
                completed=16,
                duration_s=16 * 256 / tok_s,
                output_throughput=tok_s,
                total_throughput=tok_s * 2,
                request_throughput=tok_s / 256,
            )
    do_check_history(run)
