"""The Celery broker transport: kombu's Redis transport, made to outlast a Redis restart (CELERY_BROKER_TRANSPORT).

When the broker connection drops while a task runs (a run's orchestrator holds its message unacknowledged for the
run's whole life: acks_late), Celery's consumer first collects the connection, which detaches the transport from
its client, and then closes it. Closing the channel restores the unacknowledged messages, which asks for a Redis
client of that detached transport: stock kombu 5.7 fails there with `AttributeError: 'NoneType' object has no
attribute 'hostname'`, which Celery does not take for a connection error, and the whole worker exits (its running
runs die with it). Raising a connection error instead lets the consumer reconnect as it does when idle. The
message stays where it was: unacknowledged in Redis, redelivered after the visibility timeout (the task re-checks
the run and does nothing twice), or gone with a Redis that came back empty (the beat's sweeps re-send what a
queued or live run needs).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection is closed; a new one is being made")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel
