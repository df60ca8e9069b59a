"""Auto-tuning studies: start one, cancel it, confirm a recommendation. Its rounds, planned as runs end, are
`study_rounds.py`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from ..models import AuditEvent, BenchmarkProfile, Run, ServerConfig, Study, StudyConfig
from ..reads.study_report import study_history
from ..tuning import plan
from .audit import Actor, record_event
from .experiments import do_create_experiment, save_submitted
from .quotas import check_study_budget
from .runs import do_cancel_run
from .study_rounds import advance_study, stop_study


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
    """Save the (validated) configs of every point of the space, the study, and queue its first round. Raises
    QuotaExceeded (nothing saved) when its whole budget could take more GPU-hours than the starter or the host have
    left today (`quotas.check_study_budget`), or when the first round is past a quota."""
    profile.launches = 1  # a round launches each of its configs once; rounds repeat what needs repeating
    check_study_budget(
        actor,
        host,
        [baseline, *candidates],
        profile,
        max_launches=max_launches,
        max_hours=max_hours,
        round_size=round_size,
    )
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
    advance_study(study, starter=actor)
    return study


@transaction.atomic
def do_cancel_study(study: Study, actor: Actor) -> bool:
    """Stop planning rounds and cancel the current round's runs (a live one through its teardown)."""
    study = Study.objects.select_for_update().get(pk=study.pk)
    if not study.is_running:
        return False
    stop_study(study, plan.CANCELLED, study_history(study))
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
    """An experiment of the band's config against the study's baseline, CONFIRM_LAUNCHES interleaved launches.
    Raises QuotaExceeded (nothing saved) past the quotas."""
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
