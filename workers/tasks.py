"""Celery glue: load by id, check the world, call the orchestrator. Arguments are ids, never instances."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from celery import shared_task
from django.db import close_old_connections

from experiments import actions

from . import orchestrator

log = logging.getLogger(__name__)


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@shared_task(name="workers.tasks.drive_host")
def drive_host(host_id: int) -> str | None:
    """Run the host's next queued run, if the host is free; finishing it enqueues this task again."""
    close_old_connections()
    run = actions.do_claim_next_run(host_id, _worker_name())
    if run is None:
        return None
    log.info("run %s: claimed on host %s", run.pk, host_id)
    try:
        return asyncio.run(orchestrator.drive_run(run.pk))
    except Exception as exc:
        log.exception("run %s: orchestrator crashed", run.pk)
        close_old_connections()
        actions.do_abandon_run(run, f"The orchestrator crashed: {exc!r}")
        raise
    finally:
        close_old_connections()
