"""The Celery tasks as the worker registers them."""

from __future__ import annotations

import workers.tasks  # noqa: F401  (registers the tasks with the app)
from dashboard.celery import app


def test_it_gives_every_task_a_time_limit():
    # A hung SSH call or query must not hold a worker slot for ever: the pool kills a task past its limit.
    tasks = {name: task for name, task in app.tasks.items() if name.startswith("workers.")}

    assert {"workers.tasks.drive_host", "workers.tasks.wake_idle_hosts"} <= tasks.keys()
    assert [name for name, task in tasks.items() if not task.time_limit] == []
