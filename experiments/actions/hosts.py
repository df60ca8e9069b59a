"""A host's lock and health: who may launch on it next, and whether a teardown left it dirty."""

from __future__ import annotations

from celery import current_app
from django.db import transaction

from ..models import Host, Run

# Tasks are enqueued by name: the domain never imports the workers package.
DRIVE_HOST_TASK = "workers.tasks.drive_host"


def enqueue_drive_host(host_id: int) -> None:
    """Once the transaction commits, ask a worker to run the host's next queued run (if the host is free)."""
    transaction.on_commit(lambda: current_app.send_task(DRIVE_HOST_TASK, args=[host_id]))


@transaction.atomic
def do_release_host(run: Run) -> None:
    Host.objects.filter(pk=run.host_id, active_run=run).update(active_run=None)
    enqueue_drive_host(run.host_id)


@transaction.atomic
def do_mark_host_dirty(host: Host, reason: str) -> None:
    Host.objects.filter(pk=host.pk).update(is_dirty=True, dirty_reason=reason)


@transaction.atomic
def do_mark_host_clean(host: Host) -> None:
    Host.objects.filter(pk=host.pk).update(is_dirty=False, dirty_reason="")
    enqueue_drive_host(host.pk)
