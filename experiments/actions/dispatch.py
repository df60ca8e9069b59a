"""The only module that names Celery tasks and sends them (the domain never imports the workers: it enqueues by
name). Callers send after their transaction commits (`transaction.on_commit`), and decide what a broker that cannot
be reached means for them.

Two kinds of sending: fire-and-forget wake-ups, deliveries and model listings, and questions the web tier asks a
worker and waits for (it holds no SSH keys, so a worker connects and answers). Those block the request for at most
WORKER_ANSWER_TIMEOUT; the worker itself writes what it learnt (the pinned host key, the GPU inventory), so a caller
re-reads the host. Only admins ask questions (a connection test), and a viewer of a run whose stored log was cut
at its host's cap reads the rest from the host, a bounded slice a question (`read_run_log`), and a member reads
a host's draft checkpoints live (`read_draft_checkpoints`, bounded listings and small files) and has one exported
where an admin allows it (`export_draft_checkpoint`, bounded by the worker's export timeout): nothing else another
role does waits for a worker.
"""

from __future__ import annotations

import base64
from typing import Any

import redis
from celery import current_app
from celery.exceptions import TimeoutError as CeleryTimeout
from django.conf import settings
from kombu.exceptions import OperationalError

from experiments.models import Host, Run

WORKER_ANSWER_TIMEOUT = 60
DRIVE_HOST_TASK = "workers.tasks.drive_host"
DELIVER_TASK = "workers.tasks.deliver_notification"
TEST_HOST_TASK = "workers.tasks.test_host"
LIST_HOST_MODELS_TASK = "workers.tasks.list_host_models"
READ_RUN_LOG_TASK = "workers.tasks.read_run_log"
READ_DRAFT_CHECKPOINTS_TASK = "workers.tasks.read_draft_checkpoints"
EXPORT_DRAFT_CHECKPOINT_TASK = "workers.tasks.export_draft_checkpoint"
# The most of a run's host log one question carries: it crosses Redis once as base64 (11 MB).
RUN_LOG_SLICE = 8 * 1024 * 1024


def send_drive_host(host_id: int) -> None:
    """Ask a worker to run the host's next queued run (if the host is free). Raises BrokerUnreachable."""
    current_app.send_task(DRIVE_HOST_TASK, args=[host_id])


def send_list_host_models(host_id: int) -> None:
    """Ask a worker to list the host's models again and store them (the web never waits for it; pages and the API
    show the stored list). Raises BrokerUnreachable."""
    current_app.send_task(LIST_HOST_MODELS_TASK, args=[host_id])


def send_deliver_notification(delivery_id: int) -> None:
    """Ask a worker to send a pending e-mail or webhook delivery (retrying). Raises BrokerUnreachable."""
    current_app.send_task(DELIVER_TASK, args=[delivery_id])


class HostProbeFailed(Exception):
    """A probe of a host got no answer: `status` is 502 when the host failed, 504 when no worker answered, 409
    when the worker refused the question as the host is now (nothing ran)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _ask_worker(task: str, args: list[Any]) -> dict[str, Any]:
    try:
        answer = current_app.send_task(task, args=args).get(timeout=WORKER_ANSWER_TIMEOUT)
    except CeleryTimeout as exc:
        raise HostProbeFailed(
            f"No worker answered within {WORKER_ANSWER_TIMEOUT} s; is a Celery worker running?", 504
        ) from exc
    if not answer.get("ok"):
        raise HostProbeFailed(
            answer.get("error") or "the host could not be reached", 409 if answer.get("refused") else 502
        )
    return answer


def test_host_connection(host: Host) -> None:
    """Connect through a worker, pin the host key on first contact (verify it after) and store the GPUs.

    The worker writes the key and the inventory; `host` is refreshed with them. Raises HostProbeFailed.
    """
    _ask_worker(TEST_HOST_TASK, [host.pk])
    host.refresh_from_db()


# A host log download holds a web thread and asks a worker for a slice at a time for up to half an hour: each user
# gets one at a time, so no reader of a run can tie up the web tier or the workers by opening many.


class DownloadSlot:
    """A user's place for one host log download, held in Redis while the download reads (each slice renews it), and
    gone `seconds` after the last renewal: a web process that died mid-download does not lock its user out."""

    def __init__(self, user_id: int, seconds: int) -> None:
        self._client = redis.Redis.from_url(settings.REDIS_URL)
        self._key = f"specdash:{settings.SPECDASH_INSTANCE}:host-log-download:{user_id}"
        self._seconds = seconds
        self.taken = bool(self._client.set(self._key, "1", nx=True, ex=seconds))

    def renew(self) -> None:
        if self.taken:
            self._client.expire(self._key, self._seconds)

    def release(self) -> None:
        if self.taken:
            self._client.delete(self._key)
            self.taken = False


def read_run_log(run: Run, offset: int) -> tuple[bytes, int]:
    """Up to RUN_LOG_SLICE bytes of the run's log file on its host from byte `offset`, and the file's size then,
    read through a worker. Raises HostProbeFailed."""
    answer = _ask_worker(READ_RUN_LOG_TASK, [run.pk, offset])
    return base64.b64decode(answer["data"]), int(answer["size"])


def read_draft_checkpoints(host: Host) -> list[dict[str, Any]]:
    """The host's draft training directories and their checkpoints, read now through a worker
    (serializers.training_directory_json each, or refused_directory_json). Raises HostProbeFailed."""
    return list(_ask_worker(READ_DRAFT_CHECKPOINTS_TASK, [host.pk])["directories"])


def export_draft_checkpoint(host: Host, directory: str, run_id: str, step: int) -> dict[str, Any]:
    """Have a worker export a checkpoint the host lists now for SGLang (workers.hosts.export_draft_checkpoint's
    answer: "output_dir", "command", "exit_status", "output"). Raises HostProbeFailed (409: refused, nothing ran)."""
    return _ask_worker(EXPORT_DRAFT_CHECKPOINT_TASK, [host.pk, directory, run_id, step])


def read_draft_training(host: Host, *, may_ask: bool) -> tuple[list[dict[str, Any]], str]:
    """`read_draft_checkpoints` for a page that shows what it can without them (the draft's report card): the
    directories and "" when read; [] and the reason in one line when the reader may not ask a worker (`may_ask`:
    members and up, as the host's draft checkpoints page), the host has none set (no worker is asked) or the read
    failed (the host, no worker, no broker). Never raises for those."""
    if not may_ask:
        return [], "training figures are read live from the host for members and up: served figures alone"
    if not host.draft_training_dirs:
        return [], f"{host.name} has no draft training directories set: served figures alone"
    try:
        return read_draft_checkpoints(host), ""
    except HostProbeFailed as exc:
        return [], f"the training directories could not be read ({exc}): served figures alone"
    except (OperationalError, redis.RedisError, OSError) as exc:
        return (
            [],
            f"no worker could be asked to read the training directories ({type(exc).__name__}): served figures alone",
        )
