"""Websocket transport: authenticate, join the group from `broadcast`, replay what the client missed, forward."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import broadcast
from .models import Experiment, LogChunk, Run, Study

REPLAY_PAGE = 5000


class RunLogConsumer(AsyncJsonWebsocketConsumer):
    """Streams a run's log lines and state. The client says the last line it has (`?after=N`).

    Live batches are joined before the replay so nothing written meanwhile is missed; line numbers make the
    hand-over exact: anything at or below `last_sent` is dropped, any gap is refilled from the database.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if not await _may_view(user, "experiments.view_run") or not await _run_exists(self.run_id):
            await self.close(code=4403)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        try:
            self.last_sent = max(0, int(query.get("after", ["0"])[0]))
        except ValueError:
            self.last_sent = 0
        self.group = broadcast.run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self._send_from_storage(upto=None)
        # Facts and state broadcast between the page render and this connection would otherwise be missed
        # until a reload; the client drops points it already has.
        snapshot = await _run_snapshot(self.run_id)
        await self.send_json({"type": "facts", **snapshot["facts"]})
        await self.send_json({**snapshot["state"], "type": "state"})

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def _send_from_storage(self, upto: int | None) -> None:
        while True:
            limit = REPLAY_PAGE if upto is None else min(REPLAY_PAGE, upto - self.last_sent)
            if limit <= 0:
                return
            lines = await database_sync_to_async(LogChunk.objects.lines)(self.run_id, after=self.last_sent, limit=limit)
            if not lines:
                return
            await self.send_json({"type": "lines", "first": lines[0]["n"], "lines": [x["text"] for x in lines]})
            self.last_sent = lines[-1]["n"]

    async def log_lines(self, event: dict[str, Any]) -> None:
        first, lines = event["first"], event["lines"]
        if first > self.last_sent + 1:
            await self._send_from_storage(upto=first - 1)
        skip = self.last_sent + 1 - first
        if skip >= len(lines):
            return
        fresh = lines[max(skip, 0) :]
        await self.send_json({"type": "lines", "first": first + max(skip, 0), "lines": fresh})
        self.last_sent = first + max(skip, 0) + len(fresh) - 1

    async def run_state(self, event: dict[str, Any]) -> None:
        await self.send_json({**event, "type": "state"})

    async def run_facts(self, event: dict[str, Any]) -> None:
        await self.send_json({**event, "type": "facts"})


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
