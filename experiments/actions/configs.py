"""Saving a new server config or benchmark profile (from a submission, a study or the API), as its creator's."""

from __future__ import annotations

from django.db import transaction

from ..models import AuditEvent, BenchmarkProfile, ServerConfig
from .audit import Actor, record_event


@transaction.atomic
def do_create_config(actor: Actor, config: ServerConfig) -> ServerConfig:
    """Save a validated, unsaved config as the actor's; one already stored (same name and content) is reused as
    it is, neither re-owned nor recorded again."""
    if config.pk is not None:
        return config
    config.created_by = _user(actor)
    config.save()
    record_event(actor, AuditEvent.Action.CONFIG_CREATE, config, content_hash=config.content_hash)
    return config


@transaction.atomic
def do_create_profile(actor: Actor, profile: BenchmarkProfile) -> BenchmarkProfile:
    if profile.pk is not None:
        return profile
    profile.created_by = _user(actor)
    profile.save()
    record_event(actor, AuditEvent.Action.PROFILE_CREATE, profile)
    return profile


def _user(actor: Actor):
    return actor.user if actor.user is not None and actor.user.is_authenticated else None
