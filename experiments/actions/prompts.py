"""Prompt sets: uploading one (a new version when the content differs)."""

from __future__ import annotations

from django.db import transaction

from .. import prompt_sampling
from ..models import AuditEvent, PromptSet
from .audit import Actor, record_event


@transaction.atomic
def do_create_prompt_set(actor: Actor, name: str, data: bytes) -> PromptSet:
    """A set from an uploaded file (prompt_sampling.parse_upload; PromptSetError says what is wrong and where). The
    same name and content again is the same set, not a copy; new content under a name is a new version of it."""
    conversations = prompt_sampling.parse_upload(data)
    prompt_set = PromptSet(name=name, kind=PromptSet.Kind.UPLOAD)
    prompt_set.set_conversations(conversations)
    existing = PromptSet.objects.filter(name=name, content_hash=prompt_set.content_hash).first()
    if existing is not None:
        return existing
    prompt_set.created_by = actor.user if actor.user is not None and actor.user.is_authenticated else None
    prompt_set.save()
    record_event(
        actor, AuditEvent.Action.PROMPT_SET_CREATE, prompt_set, prompts=prompt_set.prompt_count, bytes=len(data)
    )
    return prompt_set
