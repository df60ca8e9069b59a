"""The only module that knows channel-layer group names and the shape of the events sent to browsers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import lz4.block
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from redis.exceptions import RedisError

from experiments import serializers
from experiments.live import log_messages
from experiments.models import Host
from experiments.reads import queueing

if TYPE_CHECKING:
    from experiments.models import Run

log = logging.getLogger(__name__)


def run_group(run_id: int) -> str:
    return f"run-{run_id}"


def experiment_group(experiment_id: int) -> str:
    return f"experiment-{experiment_id}"


def study_group(study_id: int) -> str:
    return f"study-{study_id}"


def user_group(user_id: int) -> str:
    """A user's open pages (browser notifications)."""
    return f"user-{user_id}"


# A flood's batch is up to 20,000 lines (4 MB), and the channel layer carries an event to Redis and back once per
# watching page: packed with lz4 it is a twentieth to a fortieth of that, for ~2 ms each way. A trickle's few lines
# go as they are (packing them would save nothing).
PACK_LINES_FROM_CHARS = 64 * 1024


def log_lines_event(first_line: int, lines: list[str]) -> dict[str, Any]:
    """The event of `lines` (one per log line, without its newline) numbered from `first_line`: their text as the
    pages' messages carry it, cut and grouped once here rather than by the consumer of every page that watches.
    Read it back with `messages_of`."""
    batch = log_messages.batch(first_line, lines)
    event: dict[str, Any] = {"type": "log.lines", "first": first_line, "count": len(lines), "bounds": batch.bounds}
    if len(batch.text) < PACK_LINES_FROM_CHARS:
        event["text"] = batch.text
    else:
        event["packed"] = lz4.block.compress(batch.text.encode())
    return event


def messages_of(event: dict[str, Any]) -> list[log_messages.LinesMessage]:
    text = event["text"] if "packed" not in event else lz4.block.decompress(event["packed"]).decode()
    bounds = [tuple(bound) for bound in event["bounds"]]  # msgpack gives lists
    held = sum(bound[1] for bound in bounds)
    if held != event["count"] or (bounds and bounds[-1][3] != len(text)):
        raise ValueError(
            f"a log batch of {event['count']} lines came as {len(text)} characters for messages of {held} lines "
            f"ending at {bounds[-1][3] if bounds else 0}"
        )
    return log_messages.Batch(text, bounds).messages()  # type: ignore[arg-type]


def run_facts_event(decode: list[dict[str, Any]], metrics: dict[str, list[list[float]]]) -> dict[str, Any]:
    return {"type": "run.facts", "decode": decode, "metrics": metrics}


def server_metrics_event(samples: dict[str, Any], after: int) -> dict[str, Any]:
    """Samples of the server's gauges just stored, in the API's shape (`fields`, `samples`, `ids`), and `after`: the
    id of the run's newest sample before them, so a receiver that has not got that one knows it missed some."""
    return {"type": "server.metrics", **samples, "after": after}


def run_state_event(run: Run) -> dict[str, Any]:
    """The run's live state in the API's shape (`id` ...), and `run`, the id under the name the pages read."""
    return {"type": "run.state", "run": run.pk, **serializers.run_state_json(run)}


async def send_log_lines(run_id: int, first_line: int, lines: list[str]) -> None:
    await _send(log_lines_event(first_line, lines), run_group(run_id))


async def send_run_facts(run_id: int, decode: list[dict[str, Any]], metrics: dict[str, list[list[float]]]) -> None:
    await _send(run_facts_event(decode, metrics), run_group(run_id))


async def send_server_metrics(run_id: int, samples: dict[str, Any], after: int) -> None:
    await _send(server_metrics_event(samples, after), run_group(run_id))


def send_run_state(run: Run) -> None:
    try:
        event = run_state_event(run)
    except Exception:
        # The event carries the run's estimate, read from its host's queue and history: whatever goes wrong there
        # must not fail the run whose state changed (its page reads it all again on a reload).
        log.exception("run %s: its state event could not be built", run.pk)
        return
    async_to_sync(_send)(event, run_group(run.pk), experiment_group(run.experiment_id))


# A queue's first runs get their new place and estimate at once; those behind them re-word the times they have as
# the clock passes, and read the queue again on a reload.
QUEUE_EVENTS = 100


def send_queue_state(host_id: int) -> None:
    """A host's queue moved (a run was claimed, left the queue, or ended): the page of each queued run there, and of
    its experiment, get its new place and estimate, as a state event like any."""
    try:
        host = Host.objects.get(pk=host_id)
        standings = queueing.host_queues([host])[host_id].runs[:QUEUE_EVENTS]
        events = [
            (q.run, {"type": "run.state", "run": q.run.pk, **serializers.run_state_json(q.run, (q, q.estimate))})
            for q in standings
        ]
    except Exception:
        log.exception("host %s: its queue's state events could not be built", host_id)
        return
    for run, event in events:
        async_to_sync(_send)(event, run_group(run.pk), experiment_group(run.experiment_id))


def send_study_changed(study_id: int) -> None:
    """A trial of the study ended, a round was queued or the study stopped: its page re-reads the study."""
    async_to_sync(_send)({"type": "study.changed", "study": study_id}, study_group(study_id))


def send_notification(user_id: int, notification: dict[str, str]) -> None:
    async_to_sync(_send)({"type": "notification.show", "notification": notification}, user_group(user_id))


async def _send(event: dict[str, Any], *groups: str) -> None:
    """Best-effort: the consumer refills a gap in the log from the database and every state event carries the
    whole state, so Redis being down (restarting) may delay what the pages show but must never fail the run."""
    layer = get_channel_layer()
    assert layer is not None
    try:
        for group in groups:
            await layer.group_send(group, event)
    except (RedisError, OSError) as exc:
        log.warning("%s to %s not sent: %r", event["type"], ", ".join(groups), exc)
