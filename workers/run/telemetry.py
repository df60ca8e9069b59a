"""The GPUs' telemetry while a run loads and benchmarks: one `nvidia-smi --query-gpu ... -lms N` for the run's
life, read line by line through the run's SSH connection and stored in batches, each sample stamped with the
worker's clock (the clock the benchmark cells carry, so the run page puts both on one time axis)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from django.conf import settings

from experiments.actions.environments import do_add_gpu_samples
from experiments.analysis.telemetry import GpuReading
from experiments.models import Run
from workers.hostreads import gpus

from ..ssh import HostConnection, SSHError
from .database import db
from .stopping import cancel_and_wait

log = logging.getLogger(__name__)

STORE_EVERY_S = 2.0
READ_SIZE = 1 << 14


class GpuSampler:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.task: asyncio.Task | None = None
        self._pending: list[GpuReading] = []

    async def start(self, conn: HostConnection) -> None:
        """(Re)start sampling through `conn` (a new one after a reconnect)."""
        await self.stop()
        if settings.SPECDASH_TELEMETRY_MS > 0:
            self.task = asyncio.create_task(self._sample(conn))

    async def stop(self) -> None:
        if self.task is None:
            return
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await cancel_and_wait(self.task)
        self.task = None
        await self._store()

    async def _sample(self, conn: HostConnection) -> None:
        try:
            process = await conn.start(gpus.telemetry_loop_command(settings.SPECDASH_TELEMETRY_MS) + " 2>/dev/null")
        except SSHError as exc:
            log.warning("run %s: GPU telemetry not sampled: %s", self.run.pk, exc)
            return
        partial = b""
        stored_at = time.monotonic()
        try:
            while True:
                data = await process.stdout.read(READ_SIZE)
                if not data:
                    return  # nvidia-smi ended (no GPU driver, a reboot): the run goes on without telemetry
                now = time.time()
                *lines, partial = (partial + data).split(b"\n")
                for line in lines:
                    reading = gpus.parse_telemetry_line(line.decode("utf-8", errors="replace"), now)
                    if reading is not None:
                        self._pending.append(reading)
                if time.monotonic() - stored_at >= STORE_EVERY_S:
                    stored_at = time.monotonic()
                    await self._store()
        finally:
            process.close()

    async def _store(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        try:
            await db(do_add_gpu_samples)(self.run, batch)
        except Exception:
            # Telemetry explains a measurement; losing some must never fail the run or its teardown.
            log.exception("run %s: %d GPU samples not stored", self.run.pk, len(batch))
