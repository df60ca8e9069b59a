"""Notes (and an experiment's tags): written by the experiment's owner or a maintainer, each change audited."""

from __future__ import annotations

from django.db import transaction

from ..models import AuditEvent, Experiment, Run
from .audit import Actor, record_event


@transaction.atomic
def do_set_experiment_notes(experiment: Experiment, *, actor: Actor, notes: str, tags: str) -> bool:
    """Save the (validated) notes and tags; False, and no audit event, when nothing changed."""
    changed = [name for name, value in (("notes", notes), ("tags", tags)) if getattr(experiment, name) != value]
    if not changed:
        return False
    experiment.notes, experiment.tags = notes, tags
    experiment.save(update_fields=changed)
    # The audit log says what changed, not the text itself (a note can be long; the page shows the current one).
    record_event(actor, AuditEvent.Action.NOTES, experiment, fields=changed, tags=tags, notes_length=len(notes))
    return True


@transaction.atomic
def do_set_run_notes(run: Run, *, actor: Actor, notes: str) -> bool:
    if run.notes == notes:
        return False
    run.notes = notes
    run.save(update_fields=["notes"])
    record_event(actor, AuditEvent.Action.RUN_NOTES, run, fields=["notes"], notes_length=len(notes))
    return True
