"""One run cannot fill the database: a log flood past its host's cap is stored up to the cap, ends with a marker line
that says where the rest is, warns the run, reaches the live page with the marker, and is read on for its facts;
the database grows by the cap, not by the flood. Through a real sshd (the tail) and the real channel layer."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any, cast

import lz4.block
import pytest
from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer  # type: ignore[import-untyped]
from django.conf import settings
from django.db import connection, connections

from experiments.live import broadcast
from experiments.models import LogChunk, Run
from experiments.models.hosts import MIB
from experiments.tests.factories import make_run
from workers.run.database import db
from workers.run.log_cap import LOG_CUT_KIND, cut_marker
from workers.run.server_log import ServerLog
from workers.ssh import HostConnection
from workers.tasks import drive_host
from workers.tests.run.simruns import held_gpu_memory, queue_run, sim_config

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FLOOD_LINES = 200_000  # ~26 MB: a few seconds of `--log-requests-level 3` under load


def _decode_line(n: int) -> str:
    return (
        f"[2026-12-07 10:00:00 TP0] Decode batch. #running-req: 1, #token: {n}, token usage: 0.01, "
        f"gen throughput (token/s): {n}.00, #queue-req: 0, "
    )


def _log_table_bytes() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [LogChunk._meta.db_table])
        return int(cursor.fetchone()[0])


def _stored_text_bytes(run: Run) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT coalesce(sum(octet_length(text) + 1), 0) FROM {LogChunk._meta.db_table} WHERE run_id = %s",
            [run.pk],
        )
        return int(cursor.fetchone()[0])


class _Page:
    """A run page's channel in the run's group, read after the fact."""

    def __init__(self, run_id: int) -> None:
        config: dict[str, Any] = cast(dict, settings.CHANNEL_LAYERS)["default"]["CONFIG"]
        self.layer = RedisChannelLayer(hosts=[settings.REDIS_URL], prefix=config["prefix"])
        self.group = broadcast.run_group(run_id)
        self.channel = async_to_sync(self.layer.new_channel)()
        async_to_sync(self.layer.group_add)(self.group, self.channel)

    def log_events(self) -> list[dict[str, Any]]:
        async def drain() -> list[dict[str, Any]]:
            received = []
            while True:
                try:
                    received.append(await asyncio.wait_for(self.layer.receive(self.channel), timeout=1))
                except TimeoutError:
                    await self.layer.group_discard(self.group, self.channel)
                    return [event for event in received if event["type"] == "log.lines"]

        return async_to_sync(drain)()


def _text(event: dict[str, Any]) -> str:
    return event["text"] if "packed" not in event else lz4.block.decompress(event["packed"]).decode()


def test_a_flood_past_the_hosts_cap_is_stored_to_the_cap_marked_warned_and_read_on(sshd, tmp_path, settings):
    settings.SPECDASH_LOG_BATCH_LINES = 5000
    log = tmp_path / "server.log"
    log.write_bytes("".join(_decode_line(n) + "\n" for n in range(1, FLOOD_LINES + 1)).encode())
    leader = subprocess.Popen(["sleep", "60"])  # the server, alive: the tail reads to the file's end and stops
    run = make_run(state=Run.State.BENCHMARKING, log_path=str(log), remote_pid=leader.pid, worker="w")
    run.host.run_log_cap_mib = 1
    run.host.save(update_fields=["run_log_cap_mib"])
    run = Run.objects.select_related("host", "config", "experiment__profile").get(pk=run.pk)
    page = _Page(run.pk)
    table_before = _log_table_bytes()
    server_log = ServerLog(run)

    async def follow() -> list[dict[str, Any]]:
        conn = await HostConnection.open(sshd.access())
        try:
            await server_log.follow(conn)
            assert await server_log.read_to_end(timeout=120)
            return await server_log.lines(after=server_log.lines_read - 3, limit=10)
        finally:
            await conn.close()
            await db(connections.close_all)()  # the connection of the thread the tail stored through

    try:
        read_past_the_cut = asyncio.run(follow())
    finally:
        leader.kill()
        leader.wait()

    run.refresh_from_db()
    assert run.log_cut_line is not None
    marker = cut_marker(MIB, str(log))
    stored = [line for chunk in run.logchunk_set.order_by("first_line") for line in chunk.lines()]
    kept = run.log_cut_line - 1
    # Stored up to the cap, the flood's first lines in order, then the marker, and nothing after it.
    assert 7000 < kept < FLOOD_LINES // 10
    assert stored == [_decode_line(n) for n in range(1, kept + 1)] + [marker]
    assert run.log_lines == run.log_cut_line
    assert run.log_bytes == _stored_text_bytes(run) <= MIB + len(marker) + 1
    assert MIB - len(_decode_line(kept + 1)) - 1 < run.log_bytes - len(marker) - 1  # up to the cap, not short of it
    # The run warned once, at the marker; the tail's position is the file's end, for a worker that re-attaches.
    (warning,) = [w for w in run.warnings if w["kind"] == LOG_CUT_KIND]
    assert warning["line"] == run.log_cut_line and str(log) in warning["message"] and "1 MiB" in warning["message"]
    assert run.log_offset == log.stat().st_size
    # Read on past the cut: its live series ends with the flood's last line, and the lines the run reads back
    # (a cell's Decode lines) are there, numbered on after the marker.
    assert run.live_facts["decode"][-1]["tokens"] == FLOOD_LINES
    assert server_log.lines_read == FLOOD_LINES + 1
    assert read_past_the_cut == [{"n": n + 1, "text": _decode_line(n)} for n in range(FLOOD_LINES - 2, FLOOD_LINES + 1)]
    # The live page got the stored lines, the marker last, and nothing past it.
    events = page.log_events()
    assert events and max(e["first"] + e["count"] - 1 for e in events) == run.log_cut_line
    assert marker in _text(events[-1])
    # The database grew by less than the cap (the text is stored compressed: ~0.15 MB), not by the flood (26 MB,
    # which grew it by 2.2 MB stored whole).
    grown = _log_table_bytes() - table_before
    assert grown < MIB, grown


@pytest.mark.usefixtures("private_queue")
def test_a_run_under_the_simulated_hosts_log_flood_benchmarks_with_its_log_cut_at_the_cap(sim_host, owner):
    """The simulated host floods its log once ready (the probe's case: 45,000 lines a second), driven through the
    task entry point: the run still benchmarks and stores its measurements, its log ends at the cap with the
    marker, and the whole log is on the host."""
    sim_host.run_log_cap_mib = 1
    sim_host.save(update_fields=["run_log_cap_mib"])
    flood = {"SIMHOST_FAULTS": "log_flood", "SIMHOST_FLOOD_LINES_PER_S": "45000"}
    run = queue_run(sim_host, sim_config(sim_host, env=flood), owner)

    drive_host(run.host_id)

    run.refresh_from_db()
    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert run.measurement_set.count() == 1
    marker = cut_marker(MIB, run.log_path)
    last = run.logchunk_set.order_by("-first_line").first()
    assert last is not None and last.lines()[-1] == marker and last.last_line == run.log_cut_line == run.log_lines
    assert run.log_bytes == _stored_text_bytes(run) <= MIB + len(marker) + 1
    assert [w["line"] for w in run.warnings if w["kind"] == LOG_CUT_KIND] == [run.log_cut_line]
    assert Path(run.log_path).stat().st_size > 2 * MIB  # the rest is on the host
    assert held_gpu_memory(sim_host) == ""
