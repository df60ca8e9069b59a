"""Waiting in end-to-end and browser tests: for the event a test needs (a state in the database, a row), polled
with a bound that says what was awaited when it expires, never a fixed sleep.

In a page, Playwright's `wait_for_function` takes a function's text (`"() => ..."`), never a bare expression: it
evaluates an expression anew with the page's `eval` at each poll, which the pages' enforced policy refuses (no
'unsafe-eval'), while a function is evaluated once, from the debugging protocol, which the policy does not govern."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")
POLL_S = 0.2


def until(
    what: Callable[[], T | None],
    timeout: float,
    awaited: str,
    explain: Callable[[], str] = lambda: "",
    give_up: Callable[[], bool] = lambda: False,
) -> T:
    """What `what` returns once it is truthy. Past `timeout` seconds, or as soon as `give_up` says it can no longer
    come (a run that ended elsewhere), the test fails naming what it awaited and what `explain` says of the state."""
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found:
            return found
        if give_up():
            raise AssertionError(f"{awaited}: can no longer come\n{explain()}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{awaited}: not seen within {timeout} s\n{explain()}")
        time.sleep(POLL_S)


def in_a_thread(start: Callable[[], T]) -> T:
    """What `start` makes, made in a thread of its own, with its database connection closed after. A browser test
    needs it: Playwright's event loop runs in the test's thread, and the broadcast after a commit is sync."""
    started: list[T] = []

    def run() -> None:
        try:
            started.append(start())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert started, "it did not start (its error is above)"
    return started[0]
