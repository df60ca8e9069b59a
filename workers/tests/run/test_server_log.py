"""LineAssembler: bytes of a remote log in, complete lines out, with a byte offset that makes a resume exact; and
the server log's tail, through a real sshd, once the server is gone."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from django.db import connections
from hypothesis import given
from hypothesis import strategies as st

from experiments.actions.runs import do_append_log
from experiments.models import LogChunk
from experiments.tests.factories import make_run
from workers.run.database import db
from workers.run.log_lines import LineAssembler
from workers.run.log_tail import LogTail
from workers.run.server_log import ServerLog
from workers.ssh import HostConnection

T = TypeVar("T")


def test_it_holds_back_a_partial_last_line():
    assembler = LineAssembler()

    assert assembler.feed(b"first\nsecond\nthi") == ["first", "second"]
    assert assembler.offset == len(b"first\nsecond\n")
    assert assembler.pending_bytes == 3
    assert assembler.feed(b"rd") == []
    assert assembler.offset == len(b"first\nsecond\n")
    assert assembler.feed(b"\n") == ["third"]
    assert assembler.offset == len(b"first\nsecond\nthird\n")
    assert assembler.pending_bytes == 0


def test_it_stores_the_last_partial_line_of_a_dying_process_once():
    data = b"[2026-02-23 10:00:06] Load weight begin.\nLoading safetensors checkpoint shards:  50% Completed | 2/4"
    assembler = LineAssembler()

    assert assembler.feed(data) == ["[2026-02-23 10:00:06] Load weight begin."]
    assert assembler.finish() == ["Loading safetensors checkpoint shards:  50% Completed | 2/4"]
    assert assembler.offset == len(data) and assembler.pending_bytes == 0
    # A re-attach resumes at the stored offset: the flushed line is not read again.
    assert LineAssembler(assembler.offset).feed(data[assembler.offset :]) == []
    assert assembler.finish() == []


@pytest.mark.django_db
def test_it_stores_a_line_with_a_nul_byte_which_postgresql_text_refuses():
    assembler = LineAssembler()
    lines = assembler.feed(b"core dumped \x00\x00 here\nnext\n") + assembler.feed(b"last \x00") + assembler.finish()
    run = make_run()

    do_append_log(run, 1, lines, assembler.offset)

    assert lines == ["core dumped \ufffd\ufffd here", "next", "last \ufffd"]
    assert LogChunk.objects.get(run=run).lines() == lines


def test_it_keeps_the_last_state_of_a_partial_progress_bar():
    assembler = LineAssembler()

    assert assembler.feed(b"Capturing batches:  10%\rCapturing batches:  20%") == []
    assert assembler.finish() == ["Capturing batches:  20%"]


def test_it_counts_offsets_from_where_it_resumed():
    assembler = LineAssembler(offset=1000)

    assert assembler.feed(b"abc\nde") == ["abc"]
    assert assembler.offset == 1004


def test_it_keeps_the_last_state_of_a_progress_bar():
    data = (
        b"Loading safetensors checkpoint shards:   0% Completed | 0/64\r"
        b"Loading safetensors checkpoint shards:  50% Completed | 32/64\r"
        b"Loading safetensors checkpoint shards: 100% Completed | 64/64\n"
        b"next\n"
    )

    assert LineAssembler().feed(data) == ["Loading safetensors checkpoint shards: 100% Completed | 64/64", "next"]


def test_it_strips_crlf_line_endings():
    assert LineAssembler().feed(b"one\r\ntwo\r\n\r\n") == ["one", "two", ""]


def test_it_keeps_the_last_state_before_a_crlf():
    assert LineAssembler().feed(b" 10%\r 99%\r100%\r\n") == ["100%"]


def test_it_keeps_empty_lines():
    assert LineAssembler().feed(b"a\n\n\nb\n") == ["a", "", "", "b"]


def test_it_replaces_invalid_utf8():
    lines = LineAssembler().feed(b"ok \xff\xfe bytes\n")

    assert lines == ["ok \ufffd\ufffd bytes"]


def test_it_decodes_a_character_split_across_reads():
    encoded = "température 25 °C ✓\n".encode()
    cut = encoded.index("é".encode()) + 1  # inside the two bytes of é
    assembler = LineAssembler()

    assert assembler.feed(encoded[:cut]) == []
    assert assembler.feed(encoded[cut:]) == ["température 25 °C ✓"]
    assert assembler.offset == len(encoded)


def test_it_resumes_exactly_at_the_stored_offset():
    data = b"alpha\nbeta\ngam"
    first = LineAssembler()
    assert first.feed(data) == ["alpha", "beta"]

    # The worker died; the file grew meanwhile. A new worker resumes from the stored offset.
    data += b"ma\ndelta\n"
    second = LineAssembler(first.offset)

    assert second.feed(data[first.offset :]) == ["gamma", "delta"]
    assert second.offset == len(data)


# Pieces that make the interesting cases likely: line ends, rewrites, multi-byte and invalid bytes.
PIECES = st.sampled_from(
    [b"a", b"xyz", b" ", b"\n", b"\r", b"\r\n", "é".encode(), "✓".encode(), "🙂".encode(), b"\xff", b"\xe2\x9c"]
)
LOGS = st.lists(PIECES, max_size=60).map(b"".join)


def _cuts(data: bytes) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, len(data)), max_size=8).map(sorted)


def _feed_in_chunks(assembler: LineAssembler, data: bytes, cuts: list[int]) -> list[str]:
    lines: list[str] = []
    for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
        lines += assembler.feed(data[start:end])
    return lines


@given(st.data())
def test_it_gives_the_same_lines_however_the_bytes_are_split(data):
    log = data.draw(LOGS)
    cuts = data.draw(_cuts(log))
    whole = LineAssembler()
    expected = whole.feed(log)

    chunked = LineAssembler()

    assert _feed_in_chunks(chunked, log, cuts) == expected
    assert chunked.offset == whole.offset
    assert chunked.pending_bytes == whole.pending_bytes


@given(LOGS)
def test_it_decodes_each_line_as_decoding_it_alone_would(log):
    """Lines are decoded many at once for speed; the result is the per-line reading the class promises."""
    alone = [raw.removesuffix(b"\r").rsplit(b"\r", 1)[-1].decode("utf-8", "replace") for raw in log.split(b"\n")]

    assert LineAssembler().feed(log) == alone[:-1]


@given(st.data())
def test_it_resumes_from_any_stored_offset_without_loss_or_repeat(data):
    log = data.draw(LOGS)
    stop = data.draw(st.integers(0, len(log)))
    whole = LineAssembler()
    expected = whole.feed(log)

    first = LineAssembler()
    before = first.feed(log[:stop])
    # The offset only covers complete lines, so a new assembler re-reads the held-back partial line.
    resumed = LineAssembler(first.offset)
    after = resumed.feed(log[first.offset :])

    assert first.offset <= stop
    assert before + after == expected
    assert resumed.offset == whole.offset


@given(st.data())
def test_it_accounts_for_every_byte_once_the_writer_is_gone(data):
    log = data.draw(LOGS)
    cuts = data.draw(_cuts(log))
    whole = LineAssembler()
    expected = whole.feed(log) + whole.finish()

    chunked = LineAssembler()
    lines = _feed_in_chunks(chunked, log, cuts) + chunked.finish()

    assert lines == expected
    assert chunked.offset == len(log)
    assert len(lines) == log.count(b"\n") + (0 if log.endswith(b"\n") or not log else 1)


# ---- the tail on a real sshd ---------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_it_reads_a_dead_servers_log_to_its_end_without_waiting_for_the_leader_to_be_reaped(sshd, tmp_path):
    """`tail --pid` would wait for the leader's pid to disappear, which a late reaper delays: here the pid is never
    gone at all. Reading to the file's end stores every line once, the unfinished last one included, at once."""
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(f"line {n}\n".encode() for n in range(1, 5001)) + b"Killed")
    unreaped_leader = subprocess.Popen(["sleep", "60"])
    run = make_run(log_path=str(log), remote_pid=unreaped_leader.pid)
    server_log = ServerLog(run)

    async def follow_then_read_to_end() -> tuple[bool, float]:
        conn = await HostConnection.open(sshd.access())
        try:
            await server_log.follow(conn)
            started = time.monotonic()
            ended = await server_log.read_to_end(timeout=10)
            return ended, time.monotonic() - started
        finally:
            await conn.close()
            await db(connections.close_all)()  # the connection of the thread the tail stored through

    try:
        ended, took = asyncio.run(follow_then_read_to_end())
    finally:
        unreaped_leader.kill()
        unreaped_leader.wait()

    assert ended and took < 3
    run.refresh_from_db()
    stored = [line for chunk in run.logchunk_set.order_by("first_line") for line in chunk.lines()]
    assert stored == [f"line {n}" for n in range(1, 5001)] + ["Killed"]
    assert run.log_offset == log.stat().st_size


async def test_it_finishes_a_batch_whose_flush_was_cancelled_and_numbers_the_next_after_it():
    """The tail's end cancels its periodic flusher; one cancelled mid-batch used to leave the batch stored but never
    broadcast (a browser never saw a crash's last lines) and the next batch numbered over it."""
    handed: list[tuple[int, list[str]]] = []
    entered, release = asyncio.Event(), asyncio.Event()

    async def on_batch(first: int, lines: list[str], offset: int) -> None:
        entered.set()
        await release.wait()  # storing, then broadcasting
        handed.append((first, lines))

    tail = LogTail(None, "/unused", offset=0, next_line=1, on_batch=on_batch)  # type: ignore[arg-type]
    tail._buffer = ["a", "b"]
    flusher = asyncio.create_task(tail.flush())
    await entered.wait()
    flusher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flusher
    tail._buffer = ["c"]
    final = asyncio.create_task(tail.flush())  # as the tail's `finally` does
    await asyncio.sleep(0.01)
    assert handed == []  # the final flush waits for the batch in hand
    release.set()
    await final

    assert handed == [(1, ["a", "b"]), (3, ["c"])]
    assert tail.next_line == 4


async def test_a_tail_told_to_discard_stores_nothing_more_but_finishes_the_batch_in_hand():
    """A worker leaving a run (the database stayed away, or another worker took it over) drops what it read but has
    not stored: the next owner reads it again from the stored offset, and a batch stored now would clash with its."""
    handed: list[tuple[int, list[str]]] = []
    entered, release = asyncio.Event(), asyncio.Event()

    async def on_batch(first: int, lines: list[str], offset: int) -> None:
        entered.set()
        await release.wait()
        handed.append((first, lines))

    tail = LogTail(None, "/unused", offset=0, next_line=1, on_batch=on_batch)  # type: ignore[arg-type]
    tail._buffer = ["a"]
    in_hand = asyncio.create_task(tail.flush())
    await entered.wait()
    tail._buffer = ["b", "c"]
    tail.discard()
    release.set()
    await in_hand
    tail._buffer = ["d"]  # read after the discard (the tail's process had not closed yet)
    await tail.flush()  # as the tail's `finally` does

    assert handed == [(1, ["a"])]


# ---- pushing batches: no timer, coalescing while a batch is in hand ---------------------------------------


class _TailOutput:
    """What `tail` prints, as the chunks a test hands over: one chunk per read, b"" for the end."""

    def __init__(self) -> None:
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue()
        self.reads = 0
        self.all_taken = asyncio.Event()  # the reader took every chunk handed over so far

    def hand(self, *chunks: bytes) -> None:
        self.all_taken.clear()
        for chunk in chunks:
            self.chunks.put_nowait(chunk)

    async def read(self, size: int) -> bytes:
        chunk = await self.chunks.get()
        self.reads += 1
        if self.chunks.empty():
            self.all_taken.set()
        return chunk


class _TailProcess:
    def __init__(self) -> None:
        self.stdout = _TailOutput()

    def close(self) -> None:
        pass


class _Host:
    def __init__(self, process: _TailProcess) -> None:
        self.process = process

    async def start(self, command: str) -> _TailProcess:
        return self.process


def _on_a_stopped_clock(main: Callable[[], Awaitable[T]]) -> T:
    """Run `main` on an event loop whose clock never moves: no timer ever fires (a poll period would wait
    forever), so only what is pushed happens. A watchdog thread gives up after 20 s."""
    loop = asyncio.new_event_loop()
    loop.time = lambda: 0.0  # type: ignore[method-assign]
    task: asyncio.Task[T] = loop.create_task(main())  # type: ignore[arg-type]
    watchdog = threading.Timer(20, loop.call_soon_threadsafe, args=(task.cancel,))
    watchdog.start()
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        pytest.fail("the tail stopped handing lines over: it waited for a timer (or a batch never came)")
    finally:
        watchdog.cancel()
        left = asyncio.all_tasks(loop)
        for other in left:
            other.cancel()
        if left:  # a test that failed leaves the tail's tasks: end them on their own loop
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.close()


def _tail(on_batch: Any, batch_lines: int) -> tuple[LogTail, _TailOutput]:
    process = _TailProcess()
    host: Any = _Host(process)
    return LogTail(host, "/unused", offset=0, next_line=1, on_batch=on_batch, batch_lines=batch_lines), process.stdout


def test_it_hands_a_line_over_at_once_and_the_lines_read_meanwhile_as_one_batch_right_after():
    """A trickle's line is stored and broadcast as soon as it is read, not after a period; the lines read while a
    batch is in hand go together as the next batch the moment that one is done."""
    handed: list[tuple[int, list[str], int]] = []

    async def main() -> None:
        entered: asyncio.Queue[int] = asyncio.Queue()
        release = asyncio.Event()

        async def on_batch(first: int, lines: list[str], offset: int) -> None:
            handed.append((first, lines, offset))
            entered.put_nowait(first)
            if first == 1:
                await release.wait()  # storing and broadcasting the first line

        tail, output = _tail(on_batch, batch_lines=1000)
        following = asyncio.create_task(tail.follow())
        try:
            output.hand(b"one\n")
            assert await entered.get() == 1
            output.hand(b"two\n", b"three\nfo", b"ur\n")
            await output.all_taken.wait()
        finally:
            release.set()
        assert await entered.get() == 2
        output.hand(b"")
        await following

    _on_a_stopped_clock(main)

    assert handed == [(1, ["one"], 4), (2, ["two", "three", "four"], 19)]


def test_in_a_flood_it_reads_the_next_full_batch_while_one_is_stored_and_no_further():
    """Batches grow to `batch_lines` when lines pile up; reading goes on while a batch is stored (the database and
    the network work meanwhile) but stops one full batch ahead, so a flood's memory stays bounded."""
    chunk_lines, chunks, batch_lines = 50, 20, 100
    handed: list[tuple[int, list[str]]] = []
    reads_while_first_stored: list[int] = []

    async def main() -> None:
        first_entered, release = asyncio.Event(), asyncio.Event()

        async def on_batch(first: int, lines: list[str], offset: int) -> None:
            handed.append((first, lines))
            if first == 1:
                first_entered.set()
                await release.wait()

        tail, output = _tail(on_batch, batch_lines=batch_lines)
        following = asyncio.create_task(tail.follow())
        flood = [
            b"".join(f"line {c * chunk_lines + i + 1}\n".encode() for i in range(chunk_lines)) for c in range(chunks)
        ]
        output.hand(*flood, b"")
        try:
            await first_entered.wait()
            for _ in range(20):
                await asyncio.sleep(0)  # every other task runs until it waits
            reads_while_first_stored.append(output.reads)
        finally:
            release.set()
        await following

    _on_a_stopped_clock(main)

    # Read on to the next full batch (two chunks), and not one read further.
    assert reads_while_first_stored == [4]
    assert [first for first, _ in handed] == list(range(1, chunk_lines * chunks, batch_lines))
    assert [line for _, lines in handed for line in lines] == [f"line {n}" for n in range(1, chunk_lines * chunks + 1)]


@pytest.mark.django_db
def test_a_log_batch_from_a_worker_whose_run_was_taken_over_is_refused_and_nothing_stored():
    from experiments.models import LogChunk, Run

    run = make_run(state=Run.State.BENCHMARKING, worker="old-worker")
    do_append_log(run, 1, ["one", "two"], 8)
    Run.objects.filter(pk=run.pk).update(worker="new-worker")  # the beat handed it to another worker

    with pytest.raises(ValueError, match="driven by another worker"):
        do_append_log(run, 3, ["three"], 14)

    run.refresh_from_db()
    assert (run.log_lines, run.log_offset) == (2, 8) and LogChunk.objects.filter(run=run).count() == 1


def test_a_steady_stream_is_handed_over_at_most_once_a_gap_its_first_line_at_once():
    """Lines read a few at a time would each be a store and a broadcast; handovers at least `min_gap` apart on the
    event loop's clock carry the gap's lines together. Judged on that clock, which a loaded machine only stretches."""
    handed: list[tuple[float, list[str]]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def on_batch(first: int, lines: list[str], offset: int) -> None:
            handed.append((loop.time(), lines))

        process = _TailProcess()
        host: Any = _Host(process)
        tail = LogTail(host, "/unused", offset=0, next_line=1, on_batch=on_batch, batch_lines=1000, min_gap=0.05)
        following = asyncio.create_task(tail.follow())
        for n in range(30):
            process.stdout.hand(f"line {n}\n".encode())
            await asyncio.sleep(0.005)
        process.stdout.hand(b"")
        await following

    asyncio.run(main())

    assert [line for _, lines in handed for line in lines] == [f"line {n}" for n in range(30)]
    assert handed[0][1] == ["line 0"]  # after a quiet spell, at once
    # The last batch is the tail's end, which waits for nothing.
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(handed[:-1])]
    # Measured here, when each batch arrives, not where the tail timed its wait: a millisecond apart at most.
    assert gaps and min(gaps) >= 0.05 - 0.001
    assert len(handed) < 30 / 2


def _decode_lines(numbers: range) -> bytes:
    return "".join(
        f"[2026-12-07 10:00:00 TP0] Decode batch. #running-req: 1, #token: {n}, token usage: 0.01, "
        f"gen throughput (token/s): {n}.00, #queue-req: 0, \n"
        for n in numbers
    ).encode()


@pytest.mark.django_db(transaction=True)
def test_a_flood_is_read_while_the_batch_before_is_stored_and_its_live_series_keeps_every_point(settings, monkeypatch):
    """The tail reads on while a batch is stored (a flood's database round trips overlap its reading), two batches
    ahead and no further; every batch is broadcast after its own store and in order; and the run's live series, whose
    reading a flood's batches leave to a later one, ends with the points of all of them."""
    from workers.run import server_log as server_log_module

    settings.SPECDASH_LOG_BATCH_LINES = 100
    run = make_run(log_path="/unused")
    first_store_entered, release_first_store = threading.Event(), threading.Event()
    broadcast: list[tuple[int, bool]] = []

    def store(run: Any, first_line: int, *args: Any, **kwargs: Any) -> None:
        if first_line == 1:
            first_store_entered.set()
            release_first_store.wait(timeout=20)
        do_append_log(run, first_line, *args, **kwargs)

    async def send_log_lines(run_id: int, first_line: int, lines: list[str]) -> None:
        stored = await db(LogChunk.objects.filter(run_id=run_id, first_line=first_line).exists)()
        broadcast.append((first_line, stored))

    monkeypatch.setattr(server_log_module, "do_append_log", store)
    monkeypatch.setattr(server_log_module.broadcast, "send_log_lines", send_log_lines)
    reads_while_the_first_was_stored: list[int] = []

    async def main() -> None:
        process = _TailProcess()
        server_log = ServerLog(run)
        await server_log.follow(_Host(process))  # type: ignore[arg-type]
        try:
            process.stdout.hand(_decode_lines(range(1, 101)))
            await asyncio.to_thread(first_store_entered.wait, 20)
            process.stdout.hand(_decode_lines(range(101, 201)), _decode_lines(range(201, 301)), b"")
            for _ in range(50):
                await asyncio.sleep(0.01)  # the reader reads what it may
            reads_while_the_first_was_stored.append(process.stdout.reads)
        finally:
            release_first_store.set()
        assert await server_log.drained(timeout=20)
        await db(connections.close_all)()  # the connection of the thread the tail stored through

    asyncio.run(main())

    # The first batch being stored, the second handed over (its store waits for the first's), the third read: and
    # no further (a flood's memory stays bounded).
    assert reads_while_the_first_was_stored == [3]
    assert [first for first, _ in broadcast] == [1, 101, 201] and all(stored for _, stored in broadcast)
    run.refresh_from_db()
    stored = [line for chunk in run.logchunk_set.order_by("first_line") for line in chunk.lines()]
    assert stored == _decode_lines(range(1, 301)).decode().splitlines()
    assert [point["tokens"] for point in run.live_facts["decode"]] == list(range(1, 301))
