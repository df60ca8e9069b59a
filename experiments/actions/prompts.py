"""Prompt sets: uploading one (a new version when the content differs)."""

from __future__ import annotations

from django.db import transaction

from experiments.formats import prompt_sampling
from experiments.reads import prompt_reports

from ..models import AuditEvent, Candidate, Experiment, PromptSet
from .audit import Actor, record_event

# The divergences a candidate's stored gate keeps (with their tokens), of which the experiment page shows ten.
STORED_DIVERGENCES = 20


class PublishRefused(Exception):
    """The name belongs to a set this user may not add versions to; the message says who may."""


@transaction.atomic
def do_create_prompt_set(actor: Actor, name: str, data: bytes) -> PromptSet:
    """A set from an uploaded file (prompt_sampling.parse_upload; PromptSetError says what is wrong and where). The
    same name and content again is the same set, not a copy; new content under a name is a new version of it, which
    only the name's owner (the creator of its first version), maintainers and admins may publish (PublishRefused);
    under a built-in set's name only admins."""
    conversations = prompt_sampling.parse_upload(data)
    prompt_set = PromptSet(name=name, kind=PromptSet.Kind.UPLOAD)
    prompt_set.set_conversations(conversations)
    existing = PromptSet.objects.filter(name=name, content_hash=prompt_set.content_hash).first()
    if existing is not None:
        return existing
    first = PromptSet.objects.first_version(name)
    if first is not None and not first.can_add_version(actor.user):
        raise PublishRefused(first.who_may_add_versions())
    prompt_set.created_by = actor.user if actor.user is not None and actor.user.is_authenticated else None
    prompt_set.save()
    record_event(
        actor, AuditEvent.Action.PROMPT_SET_CREATE, prompt_set, prompts=prompt_set.prompt_count, bytes=len(data)
    )
    return prompt_set


def do_record_equivalence(experiment: Experiment) -> None:
    """Store each candidate's equivalence gate (prompt_reports.equivalence) on it: called as a run succeeds. The
    stored gate is the only one any comparison reads (`Candidate.outputs_differ`, `Candidate.equivalence`), so no page
    can judge outputs otherwise than another."""
    # Simulated-acceptance copies are exempt: their outputs are what the set accept length made them (reads/reports.py).
    candidates = [c for c in experiment.ordered_candidates() if c.simulated_accept_length is None]
    gates = prompt_reports.equivalence(experiment, experiment.baseline, candidates)
    for candidate in Candidate.objects.filter(experiment=experiment).select_related("config"):
        gate = gates.get(candidate.config.name)
        summary = gate.as_json(kept=STORED_DIVERGENCES) if gate is not None else {}
        outputs_differ = gate is not None and gate.outputs_differ
        if (candidate.equivalence, candidate.outputs_differ) == (summary, outputs_differ):
            continue  # every run's success asks again; most answers are the ones stored
        candidate.equivalence = summary
        candidate.outputs_differ = outputs_differ
        candidate.save(update_fields=["equivalence", "outputs_differ"])
