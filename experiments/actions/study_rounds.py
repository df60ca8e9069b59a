"""A study's rounds: the next one planned and queued when the last run of the current one ends, or the study stopped.

Advancing is not a loop in a worker: `advance_study_of_run` runs inside the transaction that records a run's end
(`do_advance_run`), so the round's end and the next round's creation commit together. The study's row is locked
and a round's index is unique, so two workers ending runs at once, or a worker that died and another that resumed
its run, never create a round twice; and a round is planned from the runs alone, so none is lost.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from experiments.live import broadcast

from ..models import Run, ServerConfig, Study, StudyRound
from ..reads.study_report import study_history
from ..tuning import plan, recommend
from .audit import Actor
from .experiments import do_create_experiment
from .quotas import QuotaExceeded

log = logging.getLogger(__name__)


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
    return advance_study(study)


def advance_study(study: Study, starter: Actor | None = None) -> StudyRound | None:
    """Queue the study's next round if its current one has ended (a no-op otherwise), or stop it; the caller holds
    the study's row (it made it, or locked it). A round is held to its owner's quotas like any launch: the first
    one is the `starter`'s own request, and its refusal the start's (QuotaExceeded raised); a later one's is kept on
    the study (`round_refusal`), which waits for room."""
    current = study.current_round()
    if current is not None and current.experiment.run_set.exclude(state__in=Run.TERMINAL_STATES).exists():
        return None
    history = study_history(study)
    if study.hours_spent():
        stop_study(study, plan.BUDGET, history)
        return None
    index = 0 if current is None else current.index + 1
    step = plan.plan_round(study.search_space(), history, study.plan_settings(), index)
    if step.stop:
        stop_study(study, step.stop, history)
        return None
    configs = dict(study.studyconfig_set.filter(name__in=step.candidates).values_list("name", "config_id"))
    by_id = ServerConfig.objects.in_bulk(configs.values())
    try:
        experiment = do_create_experiment(
            actor=starter if current is None and starter else Actor(study.created_by, None, None, "study"),
            name=f"{study.name[:180]} · round {index + 1}",
            host=study.host,
            baseline=study.baseline,
            candidates=[by_id[configs[name]] for name in step.candidates],
            profile=study.profile,
        )
    except QuotaExceeded as exc:
        if current is None:
            raise  # the first round is part of the start: refused to whoever started it
        # Its savepoint undid the round; the study waits, says why, and the beat plans the round again each turn.
        _set_round_refusal(study, f"Round {index + 1} waits: {exc}")
        return None
    _set_round_refusal(study, "")
    round_ = StudyRound.objects.create(study=study, index=index, experiment=experiment, candidates=step.candidates)
    transaction.on_commit(lambda: broadcast.send_study_changed(study.pk))
    return round_


def _set_round_refusal(study: Study, text: str) -> None:
    if study.round_refusal != text:
        study.round_refusal = text
        study.save(update_fields=["round_refusal"])
        transaction.on_commit(lambda: broadcast.send_study_changed(study.pk))


def stop_study(study: Study, reason: str, history: plan.History) -> None:
    """Finish the study (cancel it, for plan.CANCELLED), with its recommendation from `history`."""
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
    study.round_refusal = ""  # a stopped study waits for nothing
    study.save(update_fields=["recommendation", "state", "stop_reason", "finished_at", "round_refusal"])
    transaction.on_commit(lambda: broadcast.send_study_changed(study.pk))
