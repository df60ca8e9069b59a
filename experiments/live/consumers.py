"""Websocket transport: authenticate, join the group from `broadcast`, replay what the client missed, forward."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from experiments import serializers
from experiments.live import broadcast, log_messages
from experiments.live.shared_reads import shared_for
from experiments.models import Experiment, LogChunk, Run, ServerMetricSample, Study
from experiments.reads import environments

REPLAY_PAGE = 5000
MAX_ID = 2**63 - 1  # PostgreSQL's bigint: a larger `after` would be refused by the database, not just match nothing
# How often an open log page's consumer compares what is stored with what it sent. Every batch is stored before it
# is broadcast, so lines stored a whole period ago and still not sent were lost on the way (or are late): they are
# sent from storage and the gap is logged. The same tick re-joins the group, which a restarted Redis forgot.
STORAGE_CHECK_SECONDS = 1.0

log = logging.getLogger(__name__)


class RunLogConsumer(AsyncJsonWebsocketConsumer):
    """Streams a run's log lines, state and server-metric samples. The client says the last line it has
    (`?after=N`) and the id of the newest sample its chart has (`?metrics_after=ID`; without it, none stored before
    it connected is sent).

    Live batches are joined before the replay so nothing written meanwhile is missed; line numbers and sample ids
    make the hand-over exact: anything at or below `last_sent` (`last_metric_sent`) is dropped, any gap is refilled
    from the database.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if not await _may_view(user, "experiments.view_run") or not await _run_exists(self.run_id):
            await self.close(code=4403)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.last_sent = _id_param(query, "after") or 0
        metrics_after = _id_param(query, "metrics_after")
        self.last_metric_sent = (
            metrics_after if metrics_after is not None else await _newest_metric_id(self.run_id)
        )  # fmt: skip
        self.group = broadcast.run_group(self.run_id)
        # Live events and the storage check both send; one at a time keeps `last_sent` exact.
        self._sending = asyncio.Lock()
        self.last_state: str | None = None
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        async with self._sending:
            await self._send_from_storage(upto=None)
            await self._send_metrics_from_storage(upto=None)
            # Facts and state broadcast between the page render and this connection would otherwise be missed
            # until a reload; the client drops points it already has.
            await self._send_snapshot()
        self._watch = asyncio.create_task(self._watch_storage())

    async def disconnect(self, code: int) -> None:
        watch = getattr(self, "_watch", None)
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watch
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def _send_snapshot(self) -> None:
        snapshot = await _run_snapshot(self.run_id)
        await self.send_json({"type": "facts", **snapshot["facts"]})
        await self.send_json({**snapshot["state"], "type": "state"})
        self.last_state = snapshot["state"]["state"]

    async def _watch_storage(self) -> None:
        """Until the run has ended and its whole log was sent: lines, samples or a state that storage has had for a
        whole period without a broadcast bringing them are sent from storage (and the lost broadcast logged)."""
        seen: tuple[int, str, int] | None = None  # what storage held at the previous tick
        while True:
            await asyncio.sleep(STORAGE_CHECK_SECONDS)
            try:
                await self.channel_layer.group_add(self.group, self.channel_name)
            except Exception as exc:  # Redis restarting: storage still answers, so the page still fills in
                log.debug("run %s: re-joining %s failed: %r", self.run_id, self.group, exc)
            try:
                stored = await _stored_progress(self.run_id)
            except Exception as exc:  # the database restarting: try again next tick
                log.warning("run %s: storage check failed: %r", self.run_id, exc)
                continue
            if stored is None:
                return  # the run was deleted
            async with self._sending:
                if seen is not None:
                    await self._catch_up(seen, stored)
                lines, state, newest_metric = stored
                if (
                    state in Run.TERMINAL_STATES
                    and self.last_state == state
                    and self.last_sent >= lines
                    and self.last_metric_sent >= newest_metric
                ):
                    return
            seen = stored

    async def _catch_up(self, seen: tuple[int, str, int], now: tuple[int, str, int]) -> None:
        stored_lines, newest_metric = seen[0], seen[2]
        if self.last_sent < stored_lines:
            log.warning(
                "run %s: log lines %d-%d were stored but not broadcast to this page within %.1f s; sent from storage",
                self.run_id, self.last_sent + 1, stored_lines, STORAGE_CHECK_SECONDS,
            )  # fmt: skip
            await self._send_from_storage(upto=stored_lines)
        if self.last_metric_sent < newest_metric:
            log.warning(
                "run %s: server-metric samples after id %d were stored but not broadcast to this page within %.1f s; "
                "sent from storage",
                self.run_id, self.last_metric_sent, STORAGE_CHECK_SECONDS,
            )  # fmt: skip
            await self._send_metrics_from_storage(upto=newest_metric)
        stored_state = now[1]
        if self.last_state != stored_state and seen[1] == stored_state:  # stored a whole period ago, not received
            log.warning("run %s: state %s was not broadcast to this page; sent from storage", self.run_id, stored_state)
            await self._send_snapshot()

    async def _send_from_storage(self, upto: int | None) -> None:
        while True:
            limit = REPLAY_PAGE if upto is None else min(REPLAY_PAGE, upto - self.last_sent)
            if limit <= 0:
                return
            lines = await database_sync_to_async(LogChunk.objects.lines)(self.run_id, after=self.last_sent, limit=limit)
            if not lines:
                return
            await self._send_lines(lines[0]["n"], [x["text"] for x in lines])

    async def log_lines(self, event: dict[str, Any]) -> None:
        async with self._sending:
            first = event["first"]
            if first > self.last_sent + 1:
                await self._send_from_storage(upto=first - 1)
            if first + event["count"] - 1 <= self.last_sent:
                return
            for message in broadcast.messages_of(event):
                if message.last <= self.last_sent:
                    continue
                await self._send_message(message.after(self.last_sent) if message.first <= self.last_sent else message)

    async def _send_lines(self, first: int, lines: list[str]) -> None:
        for message in log_messages.lines_messages(first, lines):
            await self._send_message(message)

    async def _send_message(self, message: log_messages.LinesMessage) -> None:
        await self.send(text_data=message.text)
        self.last_sent = message.last

    async def run_state(self, event: dict[str, Any]) -> None:
        async with self._sending:
            await self.send_json({**event, "type": "state"})
            self.last_state = event["state"]

    async def run_facts(self, event: dict[str, Any]) -> None:
        await self.send_json({**event, "type": "facts"})

    async def _send_metrics_from_storage(self, upto: int | None) -> None:
        """The samples stored after the newest one sent, up to the id `upto` (None: all), a page at a time."""
        while upto is None or self.last_metric_sent < upto:
            ids, readings = await database_sync_to_async(environments.server_metrics_after)(
                self.run_id, self.last_metric_sent, REPLAY_PAGE
            )
            if upto is not None:
                keep = sum(1 for sample_id in ids if sample_id <= upto)
                ids, readings = ids[:keep], readings[:keep]
            if not ids:
                return
            await self._send_metrics(serializers.server_metric_samples_json(readings, ids))

    async def _send_metrics(self, shape: dict[str, Any]) -> None:
        """Samples in the API's shape (`fields`, `samples`, `ids`), and `after`: the newest id sent before them."""
        after, self.last_metric_sent = self.last_metric_sent, shape["ids"][-1]
        await self.send_json({**shape, "type": "server_metrics", "after": after})

    async def server_metrics(self, event: dict[str, Any]) -> None:
        async with self._sending:
            if event["after"] > self.last_metric_sent:
                await self._send_metrics_from_storage(upto=event["after"])
            fresh = [
                (sample_id, sample)
                for sample_id, sample in zip(event["ids"], event["samples"], strict=True)
                if sample_id > self.last_metric_sent
            ]
            if fresh:
                await self._send_metrics(
                    {"fields": event["fields"], "samples": [s for _, s in fresh], "ids": [i for i, _ in fresh]}
                )


class ExperimentConsumer(AsyncJsonWebsocketConsumer):
    """Forwards state changes of an experiment's runs (the page re-renders results when all are done)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.experiment_id = int(self.scope["url_route"]["kwargs"]["experiment_id"])
        if not await _may_view(user, "experiments.view_experiment") or not await _experiment_exists(self.experiment_id):
            await self.close(code=4403)
            return
        self.group = broadcast.experiment_group(self.experiment_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_state(self, event: dict[str, Any]) -> None:
        await self.send_json({**event, "type": "state"})


class StudyConsumer(AsyncJsonWebsocketConsumer):
    """Tells a study's page that the study changed (a trial ended, a round was queued, it stopped)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.study_id = int(self.scope["url_route"]["kwargs"]["study_id"])
        if not await _may_view(user, "experiments.view_experiment") or not await _study_exists(self.study_id):
            await self.close(code=4403)
            return
        self.group = broadcast.study_group(self.study_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def study_changed(self, event: dict[str, Any]) -> None:
        await self.send_json({**event, "type": "changed"})


class NotificationConsumer(AsyncJsonWebsocketConsumer):
    """A user's browser notifications, to each page they have open (the page shows them if they allowed it)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if not await _may_view(user, "experiments.add_subscription"):
            await self.close(code=4403)
            return
        self.group = broadcast.user_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def notification_show(self, event: dict[str, Any]) -> None:
        await self.send_json({**event["notification"], "type": "notification"})


@database_sync_to_async
def _run_snapshot(run_id: int) -> dict[str, Any]:
    run = Run.objects.get(pk=run_id)
    facts = {"decode": run.live_facts.get("decode", []), "metrics": run.live_facts.get("metrics", {})}
    return {"facts": facts, "state": broadcast.run_state_event(run)}


@shared_for(STORAGE_CHECK_SECONDS / 4)  # a crowd's pages of one run: a few reads a second, not one each
@database_sync_to_async
def _stored_progress(run_id: int) -> tuple[int, str, int] | None:
    """The lines stored, the state and the newest server-metric sample's id of a run (two index reads), or None
    once it is deleted."""
    progress = Run.objects.filter(pk=run_id).values_list("log_lines", "state").first()
    if progress is None:
        return None
    return progress[0], progress[1], ServerMetricSample.objects.newest_id(run_id)


@database_sync_to_async
def _newest_metric_id(run_id: int) -> int:
    return ServerMetricSample.objects.newest_id(run_id)


def _id_param(query: dict[str, list[str]], name: str) -> int | None:
    """A non-negative integer query parameter (a line number or a sample id), within the database's bigint; None
    when absent or not one."""
    try:
        value = max(0, int(query[name][0][:20]))
    except (KeyError, IndexError, ValueError):
        return None
    return value if value <= MAX_ID else None


@database_sync_to_async
def _may_view(user: Any, perm: str) -> bool:
    """A logged-in user whose role reads `perm` (an outsider without a role sees nothing, live or not)."""
    return user is not None and user.is_authenticated and user.has_perm(perm)


@database_sync_to_async
def _run_exists(run_id: int) -> bool:
    return Run.objects.filter(pk=run_id).exists()


@database_sync_to_async
def _experiment_exists(experiment_id: int) -> bool:
    return Experiment.objects.filter(pk=experiment_id).exists()


@database_sync_to_async
def _study_exists(study_id: int) -> bool:
    return Study.objects.filter(pk=study_id).exists()
