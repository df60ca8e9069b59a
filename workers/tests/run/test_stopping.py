"""Cancelling a task for certain, though a `wait_for` inside it swallows a cancellation (Python 3.11)."""

from __future__ import annotations

import asyncio

import pytest

from workers.run.stopping import cancel_and_wait


async def _swallows_one_cancel(swallowed: list[bool]) -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        swallowed.append(True)  # as wait_for does when its future completed in the same iteration
    await asyncio.sleep(60)


async def test_it_ends_a_task_that_swallowed_the_first_cancellation():
    swallowed: list[bool] = []
    task = asyncio.create_task(_swallows_one_cancel(swallowed))
    await asyncio.sleep(0)

    await asyncio.wait_for(cancel_and_wait(task), timeout=10)

    assert swallowed and task.cancelled()


async def test_it_leaves_a_failed_tasks_exception_on_it():
    async def fails_when_cancelled() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("stopping failed") from None

    task = asyncio.create_task(fails_when_cancelled())
    await asyncio.sleep(0)

    await cancel_and_wait(task)

    with pytest.raises(RuntimeError, match="stopping failed"):
        task.result()


async def test_a_cancellation_of_the_caller_itself_propagates():
    stubborn = asyncio.create_task(_swallows_one_cancel([]))
    await asyncio.sleep(0)
    caller = asyncio.create_task(cancel_and_wait(stubborn))
    await asyncio.sleep(0)

    caller.cancel()

    with pytest.raises(asyncio.CancelledError):
        await caller
    await cancel_and_wait(stubborn)
