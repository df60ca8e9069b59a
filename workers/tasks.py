"""Celery glue: load by id, check the world, call the run lifecycle. Arguments are ids, never instances."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import socket
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from experiments.actions.dispatch import RUN_LOG_SLICE
from experiments.actions.experiments import do_launch_scheduled_experiment
from experiments.actions.hosts import do_store_gpu_reading, do_store_model_inventory, do_store_server_flags
from experiments.actions.runs import do_abandon_run, do_claim_next_run, do_take_over_run
from experiments.actions.study_rounds import advance_stalled_studies
from experiments.models import Delivery, Experiment, Host, Run

from . import delivery as delivery_transport
from . import hosts
from .run.lifecycle import drive_run
from .ssh import SSHError

log = logging.getLogger(__name__)


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# Every task has a time limit. A run's task holds its worker slot for the run's whole life, hence the long one;
# the host probes answer a waiting web request; the periodic sweeps are a few queries.
PROBE_TIME_LIMIT = 120
SWEEP_TIME_LIMIT = 60


@shared_task(name="workers.tasks.drive_host", time_limit=settings.SPECDASH_RUN_TIME_LIMIT)
def drive_host(host_id: int) -> str | None:
    """Run the host's next queued run, if the host is free; finishing it enqueues this task again."""
    close_old_connections()
    run = do_claim_next_run(host_id, _worker_name())
    if run is None:
        return None
    log.info("run %s: claimed on host %s", run.pk, host_id)
    return _drive(run)


def _drive(run: Run) -> str | None:
    try:
        return asyncio.run(drive_run(run.pk))
    except Exception as exc:
        log.exception("run %s: orchestrator crashed", run.pk)
        close_old_connections()
        do_abandon_run(run, f"The orchestrator crashed: {exc!r}")
        raise
    finally:
        close_old_connections()


@shared_task(name="workers.tasks.reattach_stale_runs", time_limit=SWEEP_TIME_LIMIT)
def reattach_stale_runs() -> list[int]:
    """Periodic (beat): hand every live run whose worker stopped beating to a worker that will resume it."""
    close_old_connections()
    stale = list(Run.objects.stale(_stale_after()).values_list("pk", flat=True))
    for run_id in stale:
        resume_run.delay(run_id)
    return stale


@shared_task(name="workers.tasks.resume_run", time_limit=settings.SPECDASH_RUN_TIME_LIMIT)
def resume_run(run_id: int) -> str | None:
    """Re-attach to a live run (the take-over is conditional, so two workers never both resume it)."""
    close_old_connections()
    run = do_take_over_run(run_id, _worker_name(), _stale_after())
    if run is None:
        return None
    log.info("run %s: re-attached in state %s", run.pk, run.state)
    return _drive(run)


def _stale_after() -> timedelta:
    return timedelta(seconds=settings.SPECDASH_HEARTBEAT_STALE)


@shared_task(name="workers.tasks.wake_idle_hosts", time_limit=SWEEP_TIME_LIMIT)
def wake_idle_hosts() -> list[int]:
    """Periodic (beat): ask for a drive of every host with queued runs and nothing in progress. The message that
    normally does so may be lost (a Redis restart); the claim is conditional, so an extra one does no harm."""
    close_old_connections()
    waiting = list(Host.objects.waiting_for_a_worker().values_list("pk", flat=True))
    for host_id in waiting:
        drive_host.delay(host_id)
    return waiting


@shared_task(name="workers.tasks.launch_scheduled_experiments", time_limit=SWEEP_TIME_LIMIT)
def launch_scheduled_experiments() -> list[int]:
    """Periodic (beat): queue the next round of every scheduled experiment that is due."""
    close_old_connections()
    now = timezone.now()
    launched = []
    for experiment in Experiment.objects.scheduled_due(now).select_related("profile"):
        if do_launch_scheduled_experiment(experiment, now=now):
            launched.append(experiment.pk)
    return launched


@shared_task(name="workers.tasks.advance_studies", time_limit=SWEEP_TIME_LIMIT)
def advance_studies() -> list[int]:
    """Periodic (beat): plan the next round of every study whose round ended without one (normally planned in
    the transaction that records the round's last run's end)."""
    close_old_connections()
    return advance_stalled_studies()


@shared_task(name="workers.tasks.read_host_gpus", time_limit=PROBE_TIME_LIMIT)
def read_host_gpus() -> list[int]:
    """Periodic (beat): read every reachable host's GPU memory for the Hosts page. Hosts whose key is not pinned
    yet are left alone (only an admin's connection test may pin it); one that cannot be read keeps its last
    reading, whose age the page shows."""
    close_old_connections()
    pinned = list(Host.objects.exclude(host_key="").select_related("ssh_key"))
    read = []
    for host_id, reading in hosts.read_gpus(pinned).items():
        if isinstance(reading, str):
            log.info("host %s: GPUs not read: %s", host_id, reading)
            continue
        do_store_gpu_reading(host_id, reading)
        read.append(host_id)
    return read


@shared_task(name="workers.tasks.test_host", ignore_result=False, time_limit=PROBE_TIME_LIMIT)
def test_host(host_id: int) -> dict:
    """Connect (pinning the key on first contact), read the GPUs; the API waits for this answer."""
    close_old_connections()
    host = Host.objects.select_related("ssh_key").get(pk=host_id)
    try:
        result = hosts.test_connection(host)
    except SSHError as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "host_key": result.host_key, "gpus": result.gpus}


@shared_task(name="workers.tasks.read_run_log", ignore_result=False, time_limit=PROBE_TIME_LIMIT)
def read_run_log(run_id: int, offset: int) -> dict:
    """A slice of a run's log file on its host (the path the run recorded, never one a caller names), for a viewer
    downloading the log its cap cut; the web waits for this answer."""
    close_old_connections()
    run = Run.objects.select_related("host__ssh_key").filter(pk=run_id).first()
    if run is None or not run.log_path:
        return {"ok": False, "error": "the run has no log on its host"}
    try:
        data, size = hosts.read_file_range(run.host, run.log_path, max(int(offset), 0), RUN_LOG_SLICE)
    except SSHError as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "size": size, "data": base64.b64encode(data).decode()}


@shared_task(name="workers.tasks.read_draft_checkpoints", ignore_result=False, time_limit=PROBE_TIME_LIMIT)
def read_draft_checkpoints(host_id: int) -> dict:
    """The host's draft training directories read now (the paths the host's setting names, never one a caller
    names); the web waits for this answer."""
    close_old_connections()
    host = Host.objects.select_related("ssh_key").filter(pk=host_id).first()
    if host is None:
        return {"ok": False, "error": "no such host"}
    try:
        directories = hosts.read_draft_checkpoints(host)
    except SSHError as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "directories": directories}


@shared_task(name="workers.tasks.export_draft_checkpoint", ignore_result=False, time_limit=PROBE_TIME_LIMIT)
def export_draft_checkpoint(host_id: int, directory: str, run_id: str, step: int) -> dict:
    """Export a draft checkpoint the host lists now for SGLang with the host's SpecForge launcher (the paths and the
    command built here from the host's settings and listing, never a caller's); the web waits for this answer.
    `ok` false with `error`: refused or the host failed; with `exit_status`: the export ran and failed."""
    close_old_connections()
    host = Host.objects.select_related("ssh_key").filter(pk=host_id).first()
    if host is None:
        return {"ok": False, "error": "no such host"}
    try:
        answer = hosts.export_draft_checkpoint(host, directory, run_id, step)
    except SSHError as exc:
        return {"ok": False, "error": str(exc)}
    if not answer["ok"] and "exit_status" in answer:
        answer["error"] = f"the export exited with status {answer['exit_status']}: {answer['output'][-500:]}"
    return answer


@shared_task(name="workers.tasks.list_host_models", ignore_result=True, time_limit=PROBE_TIME_LIMIT)
def list_host_models(host_id: int) -> dict:
    """List the host's models and the flags its SGLang accepts, and store them; nobody waits for the answer (pages
    show the stored list's age)."""
    close_old_connections()
    host = Host.objects.select_related("ssh_key").filter(pk=host_id).first()
    if host is None:
        return {"ok": False, "error": "no such host"}
    try:
        listing = hosts.list_host(host)
    except SSHError as exc:
        log.warning("host %s: models not listed: %s", host.name, exc)
        return {"ok": False, "error": str(exc)}
    do_store_model_inventory(host, listing.models)
    if listing.server_flags is not None:
        do_store_server_flags(host, listing.server_flags)
    else:
        log.warning("host %s: SGLang's flags not read: %s", host.name, listing.flags_problem)
    return {"ok": True, "models": listing.models, "server_flags": listing.server_flags}


@shared_task(
    name="workers.tasks.deliver_notification",
    bind=True,
    max_retries=settings.SPECDASH_NOTIFY_RETRIES,
    time_limit=PROBE_TIME_LIMIT,
    acks_late=False,  # a redelivered message must not send a second e-mail; the retries below are the retry
)
def deliver_notification(self, delivery_id: int) -> str | None:
    """Send one e-mail or webhook; a failure is retried later, with a doubling delay."""
    close_old_connections()
    delivery = Delivery.objects.filter(pk=delivery_id, state=Delivery.State.PENDING).first()
    if delivery is None:
        return None
    last_attempt = self.request.retries >= self.max_retries
    if delivery_transport.deliver(delivery, last_attempt=last_attempt):
        return delivery.state
    if last_attempt:
        return delivery.state
    raise self.retry(countdown=settings.SPECDASH_NOTIFY_RETRY_DELAY * 2**self.request.retries)
