"""One storage read for all of a web process's open pages of a run, instead of one read per page.

Every open log page's consumer compares, once a period, what is stored with what it sent (consumers.py). Fifty people
watching one run made that fifty reads a second in one web process (bench/many_watchers.py), each on a database
connection of its own unless DATABASE_CONN_MAX_AGE keeps them, and all through the one thread that also runs the
pages' own queries. A read started less than `fresh_for` ago is shared instead. It can only be older than the page's
own read would have been, so lines it shows as stored were stored at least as long ago, and a catch-up it leads to is
as right as before; it comes at most `fresh_for` later.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def shared_for(fresh_for: float) -> Callable[[Callable[[int], Awaitable[T]]], Callable[[int], Awaitable[T]]]:
    """Decorate `async def read(key)`: calls with the same key within `fresh_for` seconds of a read's start (and
    on the same event loop) await that read. A caller cancelled meanwhile leaves it running for the others."""

    def decorate(read: Callable[[int], Awaitable[T]]) -> Callable[[int], Awaitable[T]]:
        started: dict[int, tuple[float, asyncio.Future[T]]] = {}

        @functools.wraps(read)
        async def shared(key: int) -> T:
            loop = asyncio.get_running_loop()
            now = loop.time()
            held = started.get(key)
            if held is None or now - held[0] > fresh_for or held[1].get_loop() is not loop:
                for stale in [k for k, (at, _) in started.items() if now - at > fresh_for]:
                    del started[stale]  # runs nobody watches any more leave nothing behind
                held = (now, asyncio.ensure_future(read(key)))
                started[key] = held
            return await asyncio.shield(held[1])

        return shared

    return decorate
