"""Many open pages of one run share its storage check (experiments/live/shared_reads.py): one read while it is
fresh, a new one once it is not, one per run, and a page that leaves does not cancel the others' read."""

from __future__ import annotations

import asyncio

from experiments.live.shared_reads import shared_for


def _counted_read(fresh_for: float):
    reads: list[int] = []
    release = asyncio.Event()

    @shared_for(fresh_for)
    async def read(run_id: int) -> tuple[int, int]:
        reads.append(run_id)
        await release.wait()
        return run_id, len(reads)

    return read, reads, release


async def test_it_reads_once_for_every_page_of_a_run_while_the_read_is_fresh():
    read, reads, release = _counted_read(fresh_for=60)
    pages = [asyncio.create_task(read(7)) for _ in range(50)]
    other = asyncio.create_task(read(8))
    await asyncio.sleep(0)
    release.set()

    assert await asyncio.gather(*pages) == [(7, 1)] * 50
    assert await other == (8, 2)
    assert reads == [7, 8]
    assert await read(7) == (7, 1)  # still fresh: the same answer


async def test_it_reads_again_once_the_read_is_older_than_its_freshness():
    read, reads, release = _counted_read(fresh_for=0.05)
    release.set()
    assert await read(7) == (7, 1)
    await asyncio.sleep(0.06)  # the freshness itself is what is waited out

    assert await read(7) == (7, 2)
    assert reads == [7, 7]


async def test_it_finishes_the_read_for_the_others_when_a_page_leaves():
    read, reads, release = _counted_read(fresh_for=60)
    leaving, staying = asyncio.create_task(read(7)), asyncio.create_task(read(7))
    await asyncio.sleep(0)
    leaving.cancel()
    release.set()

    assert await staying == (7, 1)
    assert leaving.cancelled()
    assert reads == [7]
