"""Starting an acceptance headroom study: one experiment of a config, its simulated-acceptance copies and the
baseline, interleaved (the statistics are in `analysis/headroom.py`, the page's read in `reads/headroom.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from ..models import AuditEvent, Experiment, HeadroomStudy, ServerConfig
from ..rules import headroom
from .audit import Actor, record_event
from .experiments import do_create_experiment

MAX_NAME = ServerConfig._meta.get_field("name").max_length or 128


def simulated_copy(config: ServerConfig, length: float) -> ServerConfig:
    """`config` with its accept length set to `length` (unsaved, or the stored config of the same name and
    content, so a second study extends the same history series)."""
    value = headroom.env_value(length)
    copy = ServerConfig(
        **{field: getattr(config, field) for field in ServerConfig.LAUNCH_FIELDS},
        name=f"{config.name[: MAX_NAME - 12]} · AL {value}",
    )
    copy.env = headroom.simulated_env(config.env, length)
    stored = ServerConfig.objects.with_hash(copy.compute_hash()).filter(name=copy.name).first()
    return stored or copy


@transaction.atomic
def do_start_headroom(
    source: Experiment, *, config: ServerConfig, accept_lengths: Sequence[float], actor: Actor
) -> HeadroomStudy:
    """Queue the study's experiment on the source's host under its profile: the baseline, `config` as it is and one
    copy per simulated accept length, each launched `profile.launches` times, interleaved. The form has checked
    the config and the lengths (`forms/headroom.py`). Raises QuotaExceeded (nothing saved) past the quotas."""
    lengths = sorted(accept_lengths)
    copies = [simulated_copy(config, length) for length in lengths]
    experiment = do_create_experiment(
        actor=actor,
        name=f"{source.name[:150]} · headroom of {config.name}"[:200],
        host=source.host,
        baseline=source.baseline,
        candidates=[config, *copies],
        profile=source.profile,
    )
    study = HeadroomStudy.objects.create(
        source=source, config=config, accept_lengths=lengths, experiment=experiment, created_by=actor.user
    )
    record_event(actor, AuditEvent.Action.HEADROOM_START, study, source=source.pk, accept_lengths=lengths)
    return study
