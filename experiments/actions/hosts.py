"""Hosts and SSH keys: registration and edits (admins), the connection test, the lock that keeps a host to one
run at a time, and whether a teardown left it dirty."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from experiments.actions import dispatch
from experiments.rules import secrets

from ..models import AuditEvent, Host, Run, SshKey
from .audit import Actor, record_event
from .notifications import notify_host_dirty

# What a host edit records: everything but the worker-written facts (key pin, inventory, lock, health).
AUDITED_HOST_FIELDS = (*Host.ADMIN_FIELDS, "ssh_key_id", "extra_env_prefixes", "extra_flags", "default_env")

log = logging.getLogger(__name__)


def enqueue_drive_host(host_id: int) -> None:
    """Once the transaction commits, ask a worker to run the host's next queued run (if the host is free)."""
    transaction.on_commit(lambda: _send_drive_host(host_id))


def _send_drive_host(host_id: int) -> None:
    try:
        dispatch.send_drive_host(host_id)
    except BrokerUnreachable as exc:
        # Only a wake-up is lost, not the committed change (a finished run, a submission): the beat's
        # wake_idle_hosts asks again within SPECDASH_WAKE_EVERY once Redis is back.
        log.warning("host %s: wake-up not sent, the beat will send it: %r", host_id, exc)


def _audited(host: Host, field: str) -> Any:
    """A field's value as the audit keeps it: the default environment with its secrets masked (the host's history
    is shown to every member)."""
    value = getattr(host, field)
    return secrets.shown(value or {}) if field == "default_env" else value


MODEL_LISTING_COOLDOWN = timedelta(seconds=30)


@transaction.atomic
def do_request_model_listing(host: Host, actor: Actor) -> bool:
    """Ask a worker (after the commit) to list the host's models again over SSH and store them; False, and nothing
    asked, when someone asked less than MODEL_LISTING_COOLDOWN ago (each listing is an SSH session on the host)."""
    Host.objects.select_for_update().filter(pk=host.pk).first()  # one asker at a time decides
    recent = AuditEvent.objects.about(host).filter(
        action=AuditEvent.Action.HOST_MODELS, at__gte=timezone.now() - MODEL_LISTING_COOLDOWN
    )
    if recent.exists():
        return False
    record_event(actor, AuditEvent.Action.HOST_MODELS, host, models_root=host.models_root)
    transaction.on_commit(lambda: _send_list_host_models(host.pk))
    return True


def do_read_host_again_for_version(host: Host, sglang_version: str | None) -> bool:
    """A run's fingerprint read `sglang_version` where the stored flag listing holds another one's: ask a worker to
    read the host again (after the commit), so that the next submission is checked against the SGLang it now has."""
    if not sglang_version or host.known_server_flags() is None or host.listed_sglang_version == sglang_version:
        return False
    transaction.on_commit(lambda: _send_list_host_models(host.pk))
    return True


def _send_list_host_models(host_id: int) -> None:
    try:
        dispatch.send_list_host_models(host_id)
    except BrokerUnreachable as exc:
        # The stored list stays as it was, with its age shown; asking again once Redis is back lists them.
        log.warning("host %s: model listing not sent: %r", host_id, exc)


@transaction.atomic
def do_register_host(host: Host, actor: Actor) -> Host:
    """Save a new (validated) host."""
    host.save()
    record_event(actor, AuditEvent.Action.HOST_CREATE, host, **{f: _audited(host, f) for f in AUDITED_HOST_FIELDS})
    return host


@transaction.atomic
def do_edit_host(host: Host, actor: Actor) -> Host:
    """Save an edited (validated) host; the audit records what changed, before and after. A new address or key
    drops the pinned host key: the next connection test pins the new host's."""
    before = Host.objects.select_for_update().get(pk=host.pk)
    changes = {
        f: [_audited(before, f), _audited(host, f)]
        for f in AUDITED_HOST_FIELDS
        if getattr(before, f) != getattr(host, f)
    }
    if {"address", "port"} & changes.keys():
        host.host_key = ""
    host.save()
    if changes:
        record_event(actor, AuditEvent.Action.HOST_EDIT, host, changes=changes)
    return host


def do_test_host(host: Host, actor: Actor) -> None:
    """Connect through a worker, pin the host key on first contact (verify it after), record an unverified SSH key's
    public key, store the GPUs. Raises dispatch.HostProbeFailed (recorded too)."""
    was_pinned = host.is_pinned
    try:
        dispatch.test_host_connection(host)
    except dispatch.HostProbeFailed as exc:
        record_event(actor, AuditEvent.Action.HOST_TEST, host, ok=False, error=str(exc)[:500])
        raise
    record_event(actor, AuditEvent.Action.HOST_TEST, host, ok=True, pinned=not was_pinned, host_key=host.host_key)


def do_export_draft_checkpoint(host: Host, actor: Actor, directory: str, run_id: str, step: int) -> dict[str, Any]:
    """Have a worker export step `step` of run `run_id` in the host's training directory `directory` for SGLang with
    the admin's SpecForge launcher (rules/draft_export.py builds the command from the host's listing, re-read by the
    worker). Recorded whether it ran or not. Raises ExportRefused (no launcher: nothing asked) or
    dispatch.HostProbeFailed (409: refused by the worker, 502: the host or the export failed, 504: no worker)."""
    if not host.specforge_launcher.strip():
        raise ExportRefused("An admin has not allowed draft exports on this host (it has no SpecForge launcher).")
    asked = {"directory": directory[:512], "run_id": run_id[:200], "step": step}
    try:
        answer = dispatch.export_draft_checkpoint(host, directory, run_id, step)
    except dispatch.HostProbeFailed as exc:
        record_event(actor, AuditEvent.Action.HOST_EXPORT, host, ok=False, error=str(exc)[:1000], **asked)
        raise
    record_event(
        actor,
        AuditEvent.Action.HOST_EXPORT,
        host,
        ok=True,
        output_dir=answer["output_dir"],
        command=answer["command"],
        output=str(answer.get("output") or "")[-1000:],
        **asked,
    )
    return answer


class ExportRefused(Exception):
    """A draft export this host does not allow; nothing was asked of a worker."""


def do_store_model_inventory(host: Host, models: list[dict[str, Any]]) -> None:
    """Keep the models a worker just listed on the host, with the root it listed: the submission checks model paths
    and model pairs against them (a worker-written fact, like the GPU inventory)."""
    host.model_inventory = {"models_root": host.models_root, "models": models}
    host.model_inventory_at = timezone.now()
    host.save(update_fields=["model_inventory", "model_inventory_at"])


def do_store_server_flags(host: Host, listing: dict[str, Any]) -> None:
    """Keep the flags the host's SGLang accepts (`rules.server_flags.listing`), read by a worker with its launcher."""
    host.server_flags = listing
    host.server_flags_at = timezone.now()
    host.save(update_fields=["server_flags", "server_flags_at"])


@transaction.atomic
def do_store_connection_test(host: Host, host_key: str, gpus: list[dict[str, Any]]) -> None:
    """Keep what a connection test learnt: the GPUs, and the host key on first contact (trust on first use, by an
    admin's explicit action; a pinned key is only ever verified, never replaced here)."""
    host.gpu_inventory = gpus
    host.gpus_read_at = timezone.now()
    fields = ["gpu_inventory", "gpus_read_at"]
    if not host.is_pinned:
        host.host_key = host_key
        fields.append("host_key")
    host.save(update_fields=fields)


def do_record_key_public_half(key: SshKey, public_key: str) -> None:
    """An unverified key's public half, read from its file by the worker that first uses it for an admin."""
    key.public_key = public_key
    key.save(update_fields=["public_key"])


def do_store_gpu_reading(host_id: int, gpus: list[dict[str, Any]]) -> None:
    """Keep what nvidia-smi says of a host's GPUs now (the beat's periodic reading, for the Hosts page)."""
    Host.objects.filter(pk=host_id).update(gpu_inventory=gpus, gpus_read_at=timezone.now())


@transaction.atomic
def do_register_key(key: SshKey, actor: Actor) -> SshKey:
    key.created_by = actor.user if actor.user and actor.user.is_authenticated else None
    key.save()
    record_event(actor, AuditEvent.Action.KEY_CREATE, key, file_name=key.file_name, fingerprint=key.fingerprint)
    return key


@transaction.atomic
def do_edit_key(key: SshKey, actor: Actor) -> SshKey:
    before = SshKey.objects.select_for_update().get(pk=key.pk)
    key.save()
    changes = {
        f: [getattr(before, f), getattr(key, f)]
        for f in ("name", "file_name", "fingerprint")
        if getattr(before, f) != getattr(key, f)
    }
    record_event(actor, AuditEvent.Action.KEY_EDIT, key, changes=changes)
    return key


@transaction.atomic
def do_delete_key(key: SshKey, actor: Actor) -> None:
    """Forget a key no host uses (a host's key is protected: change the host first)."""
    record_event(actor, AuditEvent.Action.KEY_DELETE, key, file_name=key.file_name, fingerprint=key.fingerprint)
    key.delete()


def lock_host_row(host_id: int) -> None:
    """Every transaction that changes both a host and its runs takes the host row first, so two of them never each
    hold what the other waits for (a claim held the host and waited for a queued run that a failing run's release
    had cancelled, while the release waited for the host: a deadlock that failed the run as a crash)."""
    Host.objects.select_for_update(no_key=True).filter(pk=host_id).values_list("pk", flat=True).first()


@transaction.atomic
def do_release_host(run: Run) -> None:
    Host.objects.filter(pk=run.host_id, active_run=run).update(active_run=None)
    enqueue_drive_host(run.host_id)


@transaction.atomic
def do_mark_host_dirty(host: Host, reason: str) -> None:
    became_dirty = Host.objects.filter(pk=host.pk, is_dirty=False).update(is_dirty=True, dirty_reason=reason)
    if not became_dirty:
        Host.objects.filter(pk=host.pk).update(dirty_reason=reason)
        return
    notify_host_dirty(host, reason)


@transaction.atomic
def do_mark_host_clean(host: Host, actor: Actor) -> None:
    reason = Host.objects.filter(pk=host.pk).values_list("dirty_reason", flat=True).first() or ""
    Host.objects.filter(pk=host.pk).update(is_dirty=False, dirty_reason="")
    record_event(actor, AuditEvent.Action.HOST_CLEAN, host, was=reason)
    enqueue_drive_host(host.pk)
