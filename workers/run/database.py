"""The run lifecycle's one way to the database: ORM calls from the event loop that outlast a database restart.

A run outlives its database connection: PostgreSQL restarted for an upgrade or a failover kills every backend,
and the run, its server and its GPUs must not be lost for that. A call that fails because the connection is gone
is retried on a new connection for up to SPECDASH_DB_OUTAGE_WINDOW seconds. The calls are idempotent or
conditional (a log batch is stored only right after the stored lines), so one whose commit was lost with the
connection is safe to repeat; an error from a working connection (a constraint, a bad query) is raised at once.
A longer outage raises DatabaseUnreachable: the orchestrator then leaves the run as it is (its server running, its
facts stored up to the outage) for a worker to re-attach once the database is back, instead of failing it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_EVERY_MAX = 2.0


class DatabaseUnreachable(Exception):
    """The database stayed unreachable for the whole outage window (the cause is chained)."""


def db(func: Callable[..., T]) -> Callable[..., Any]:
    """`func` (an ORM call) run from the event loop, in the one thread that owns this worker's DB connection."""
    return sync_to_async(_outlasting_outages(func), thread_sensitive=True)


def _outlasting_outages(func: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> T:
        window = settings.SPECDASH_DB_OUTAGE_WINDOW
        deadline = time.monotonic() + window
        pause = 0.25
        while True:
            try:
                return func(*args, **kwargs)
            except (OperationalError, InterfaceError) as exc:
                # Inside a caller's transaction a retry would run outside it: only the outermost call retries.
                if connection.in_atomic_block or _connection_works():
                    raise
                if time.monotonic() + pause > deadline:
                    raise DatabaseUnreachable(f"the database was unreachable for {window:.0f} s: {exc}") from exc
                log.warning("database unreachable (%s); retrying on a new connection", str(exc).strip())
                with contextlib.suppress(DatabaseError):
                    connection.close()
                time.sleep(pause)
                pause = min(pause * 2, RETRY_EVERY_MAX)

    return call


def _connection_works() -> bool:
    return connection.connection is not None and connection.is_usable()
