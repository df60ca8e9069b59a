"""Stopping an asyncio task for certain.

Python 3.11's `asyncio.wait_for` returns its future's result when a cancellation arrives in the same loop iteration
as that future completes (3.12 fixed it): the cancellation is lost and the task runs on. The phases, the log tail,
the telemetry sampler and the profiling load all wait in `wait_for` somewhere, so one `cancel()` is not enough: under
load a cancelled run was left warming up until its readiness timeout failed it.
"""

from __future__ import annotations

import asyncio
from typing import Any

RECANCEL_AFTER = 0.5  # seconds a cancelled task may take to end before it is cancelled again


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended, cancelling it again while it runs on. Its outcome stays on the
    task (`task.result()` re-raises it) and counts as retrieved. A cancellation of the caller itself propagates."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_AFTER)
    if not task.cancelled():
        task.exception()  # retrieved: a caller that does not want it is not warned about it at exit
