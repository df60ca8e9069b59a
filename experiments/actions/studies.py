"""Auto-tuning studies: start one, advance it when a round's last run ends, cancel it.

Advancing is not a loop in a worker: `advance_study_of_run` runs inside the transaction that records a run's end
(`do_advance_run`), so the round's end and the next round's creation commit together. The study's row is locked
and a round's index is unique, so two workers ending runs at once, or a worker that died and another that resumed
its run, never create a round twice; and a round is planned from the runs alone, so none is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from experiments.live import broadcast

from ..models import AuditEvent, BenchmarkProfile, Run, ServerConfig, Study, StudyConfig, StudyRound
from ..reads.study_report import study_history
from ..tuning import plan, recommend
from .audit import Actor, record_event
from .experiments import do_create_experiment, save_submitted

log = logging.getLogger(__name__)


@transaction.atomic
def do_start_study(
    *,
    actor: Actor,
    name: str,
    host: Any,
    baseline: ServerConfig,
    base: dict[str, Any],
    space: dict[str, Any],
    candidates: Sequence[ServerConfig],
    profile: BenchmarkProfile,
    tolerance: float,
    max_launches: int,
    max_hours: float | None,
    round_size: int,
    seed: int,
) -> Study:
    """Save the (validated) configs of every point of the space, the study, and queue its first round."""
    profile.launches = 1  # a round launches each of its configs once; rounds repeat what needs repeating
    save_submitted(actor, [baseline, *candidates], profile)
    study = Study.objects.create(
        name=name,
        host=host,
        baseline=baseline,
        profile=profile,
        base=base,
        space=space,
        tolerance=tolerance,
        max_launches=max_launches,
        max_hours=max_hours,
        round_size=round_size,
        seed=seed,
        created_by=actor.user,
    )
    StudyConfig.objects.bulk_create(StudyConfig(study=study, name=c.name, config=c) for c in candidates)
    record_event(actor, AuditEvent.Action.STUDY_START, study, host=host.name, configs=len(candidates))
    _advance(study)
    return study


def advance_study_of_run(run: Run) -> None:
    """Called when `run` ended: if it was the last live run of its study's current round, plan the next.

    In a savepoint: whatever goes wrong planning a round must not undo the record of the run's end; the beat's
    `advance_stalled_studies` plans it again later."""
    round_ = StudyRound.objects.filter(experiment_id=run.experiment_id).only("study_id").first()
    if round_ is None:
        return
    try:
        with transaction.atomic():
            do_advance_study(round_.study_id)
    except Exception:
        log.exception("study %s: the next round was not planned (the beat tries again)", round_.study_id)
    transaction.on_commit(lambda: broadcast.send_study_changed(round_.study_id))


def advance_stalled_studies() -> list[int]:
    """The running studies whose current round has ended and that got no next round (its planning failed, or the
    run's end was recorded by an older version): plan it now. Idempotent like every advance."""
    advanced = []
    for study_id in Study.objects.filter(state=Study.State.RUNNING).values_list("pk", flat=True):
        queued = do_advance_study(study_id)
        if queued is not None or not Study.objects.filter(pk=study_id, state=Study.State.RUNNING).exists():
            advanced.append(study_id)
    return advanced


@transaction.atomic
def do_advance_study(study_id: int) -> StudyRound | None:
    """Queue the study's next round if its current one has ended (a no-op otherwise), or stop it."""
    # Only the study's row is locked (not its host's, which claims and releases update meanwhile).
    study = Study.objects.select_for_update(of=("self",)).select_related("profile", "host").get(pk=study_id)
    if not study.is_running:
        return None
    return _advance(study)


def _advance(study: Study) -> StudyRound | None:
    current = study.current_round()
    if current is not None and current.experiment.run_set.exclude(state__in=Run.TERMINAL_STATES).exists():
        return None
    history = study_history(study)
    if study.hours_spent():
        _stop(study, plan.BUDGET, history)
        return None
    index = 0 if current is None else current.index + 1
    step = plan.plan_round(study.search_space(), history, study.plan_settings(), index)
    if step.stop:
        _stop(study, step.stop, history)
        return None
    configs = dict(study.studyconfig_set.filter(name__in=step.candidates).values_list("name", "config_id"))
    by_id = ServerConfig.objects.in_bulk(configs.values())
    experiment = do_create_experiment(
        actor=Actor(study.created_by, None, None, "study"),
        name=f"{study.name[:180]} · round {index + 1}",
        host=study.host,
        baseline=study.baseline,
        candidates=[by_id[configs[name]] for name in step.candidates],
        profile=study.profile,
    )
    round_ = StudyRound.objects.create(study=study, index=index, experiment=experiment, candidates=step.candidates)
    transaction.on_commit(lambda: broadcast.send_study_changed(study.pk))
    return round_


def _stop(study: Study, reason: str, history: plan.History) -> None:
    best = recommend.best_per_concurrency(history, study.plan_settings())
    study.recommendation = [
        {
            "low": band.low,
            "high": band.high,
            "config": band.config,
            "text": band.describe(),
            "best": [vars(b) for b in band.best],
        }
        for band in recommend.bands(best)
    ]
    study.state = Study.State.CANCELLED if reason == plan.CANCELLED else Study.State.FINISHED
    study.stop_reason = reason
    study.finished_at = timezone.now()
    study.save(update_fields=["recommendation", "state", "stop_reason", "finished_at"])
    transaction.on_commit(lambda: broadcast.send_study_changed(study.pk))


@transaction.atomic
def do_cancel_study(study: Study, actor: Actor) -> bool:
    """Stop planning rounds and cancel the current round's runs (a live one through its teardown)."""
    from .runs import do_cancel_run  # runs.py imports this module (a run's end advances its study)

    study = Study.objects.select_for_update().get(pk=study.pk)
    if not study.is_running:
        return False
    _stop(study, plan.CANCELLED, study_history(study))
    current = study.current_round()
    if current is not None:
        for run in current.experiment.run_set.exclude(state__in=Run.TERMINAL_STATES):
            do_cancel_run(run, actor)
    record_event(actor, AuditEvent.Action.STUDY_CANCEL, study)
    return True


CONFIRM_LAUNCHES = 3


def recommended_config(study: Study, band: int) -> ServerConfig:
    """The saved config of the study's `band`-th recommendation (the baseline for "no speculation"); raises
    IndexError for a band the study does not have."""
    config_name = study.recommendation[band]["config"]
    if config_name == plan.BASELINE:
        return study.baseline
    return study.studyconfig_set.select_related("config").get(name=config_name).config


@transaction.atomic
def do_confirm_recommendation(study: Study, band: int, *, actor: Actor) -> Any:
    """An experiment of the band's config against the study's baseline, CONFIRM_LAUNCHES interleaved launches."""
    config = recommended_config(study, band)
    profile = BenchmarkProfile.objects.get(pk=study.profile_id)  # a copy: the study's own stays as it is
    profile.pk, profile.launches, profile.name = None, CONFIRM_LAUNCHES, f"{study.name[:100]} confirmation"
    text = study.recommendation[band]["text"]
    return do_create_experiment(
        actor=actor,
        name=f"{study.name} · confirm {text}"[:200],
        host=study.host,
        baseline=study.baseline,
        candidates=[] if config.pk == study.baseline_id else [config],
        profile=profile,
    )
