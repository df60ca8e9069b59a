"""The profiling cell of a run that asked for one (`Run.profile_requested`): after the measured cells, never inside
one, at each concurrency of the profile, the server is put under load, profiled for a bounded number of steps
through SGLang's `/start_profile` (CPU and GPU activities; never `profile_by_stage`, which with speculation blocks
the scheduler, sglang #34942), waited on until it logs "Profiling done", and its rank traces are fetched over SFTP,
each bounded in size, summarised per speculative phase and stored. Nothing here fails a run: a profile that goes
wrong is a warning and a row saying why; the measured cells stand as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import math
import re
import shlex
import time

from django.conf import settings
from django.db.models import Sum

from experiments.actions.profile_traces import do_record_profile_trace
from experiments.analysis import trace_summary
from experiments.formats import chrome_trace
from experiments.models import ProfileTrace, Run
from experiments.models.hosts import MIB

from ..ssh import CommandResult, ConnectionLost, FileTooLarge, SSHError
from . import benchmark
from .errors import RunCancelled, RunFailed
from .session import RunSession, db
from .stopping import cancel_and_wait

log = logging.getLogger(__name__)

MAX_STEPS = 200
WARMUP_S = 1.0  # the load's first requests are prefills; the profile starts once decoding is under way
DONE_WAIT_S = 60.0  # for "Profiling done" after the steps (the server writes every rank's file first)
POLL_S = 0.25
DONE_LINE = "Profiling done. Traces are saved to:"
TRACE_CAP_KIND = "trace_cap"
MAX_RANKS = 16
# Roughly how many decode steps the warm-up costs at ~20 ms a step: the load must outlast it and the profile.
WARMUP_STEPS = 50
MAX_WAVES = 32


def profile_id(run: Run, concurrency: int) -> str:
    return f"specdash-run{run.pk}-c{int(concurrency)}"


def output_dir(session: RunSession, concurrency: int) -> str:
    return f"{session.work_dir}/runs/run-{session.run.pk}-profile-c{int(concurrency)}"


def trace_name_pattern(run: Run, concurrency: int) -> re.Pattern[str]:
    """The rank files SGLang writes for our profile id (any `-DP-/-PP-/-EP-` parts after the TP rank)."""
    return re.compile(rf"^{re.escape(profile_id(run, concurrency))}-TP-(\d+)(?:-[A-Z]+-\d+)*\.trace\.json\.gz$")


def start_body(out_dir: str, pid: str, steps: int) -> dict[str, object]:
    """The /start_profile body: every value ours (paths and ids built from integers), none from a user."""
    return {
        "output_dir": out_dir,
        "num_steps": steps,
        "activities": ["CPU", "GPU"],
        "profile_id": pid,
        "profile_by_stage": False,
        "with_stack": False,
        "record_shapes": False,
    }


async def profile_cells(session: RunSession) -> None:
    run = session.run
    if not run.profile_requested:
        return
    engine = session.server_log.engine
    if not engine.supports_profiling:
        # The forms refuse it; a run stored otherwise is measured and says why it has no profile.
        await session.warn("profiling", f"Not profiled: specdash profiles SGLang servers only, not {engine.label}.")
        return
    done = await db(lambda: set(ProfileTrace.objects.filter(run=run).values_list("concurrency", flat=True)))()
    session.server_log.keep_lines_containing(DONE_LINE)  # read back past the log's cut too
    for concurrency in session.profile.concurrency:
        if concurrency in done:
            continue  # profiled before a re-attach
        try:
            await _profile_at(session, int(concurrency))
        except (RunCancelled, RunFailed, ConnectionLost):
            raise
        except Exception as exc:
            log.exception("run %s: profiling at concurrency %s failed", run.pk, concurrency)
            message = f"Profiling at concurrency {concurrency} failed: {exc}"
            await db(do_record_profile_trace)(run, concurrency, 0, state=ProfileTrace.State.FAILED, message=message)
            await session.warn("profile", message)


def _load_profile(session: RunSession, concurrency: int, steps: int):
    """The measured profile's request shape, with enough requests to keep `concurrency` in flight through the
    warm-up and the profiled steps (random ids: the load is there to fill batches, not to be measured)."""
    load = copy.copy(session.profile)
    tokens_per_wave = max(1.0, load.output_len / 2)  # ~2 tokens a step with speculation, 1 without: a bound
    waves = min(MAX_WAVES, max(2, math.ceil((steps + WARMUP_STEPS) / tokens_per_wave) + 1))
    load.num_prompts = concurrency * waves
    load.warmup_requests = 0
    return load


async def _profile_at(session: RunSession, concurrency: int) -> None:
    run, conn = session.run, session.require_conn()
    steps = max(1, min(int(settings.SPECDASH_PROFILE_STEPS), MAX_STEPS))
    out_dir, pid = output_dir(session, concurrency), profile_id(run, concurrency)
    await conn.run(f"rm -rf -- {shlex.quote(out_dir)} && mkdir -p -- {shlex.quote(out_dir)}")
    window_start = session.server_log.lines_read + 1
    load_profile = _load_profile(session, concurrency, steps)
    argv = benchmark.command(
        session.host, load_profile, concurrency, session.work_dir, benchmark.client_pid_file(session)
    )
    load = asyncio.create_task(conn.run(argv, timeout=benchmark.timeout(load_profile, concurrency)))
    try:
        await asyncio.wait({load}, timeout=WARMUP_S)
        status, reply = await session.api.post_json("/start_profile", start_body(out_dir, pid, steps))
        if status != 200:
            raise SSHError(f"/start_profile answered {status}: {reply.strip()[:300]}")
        finished = await _wait_done(session, window_start, load)
        result = await load
    finally:
        if not load.done():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await cancel_and_wait(load)
            await benchmark.stop_client(session)
    if not finished:
        raise SSHError(f'the server did not log "{DONE_LINE}" within {DONE_WAIT_S:.0f} s')
    if not result.ok:
        await session.raise_if_server_died()
    if await _fetch_traces(session, concurrency, out_dir, steps):
        with contextlib.suppress(SSHError):
            await conn.run(f"rm -rf -- {shlex.quote(out_dir)}")


async def _done_logged(session: RunSession, window_start: int) -> bool:
    await session.server_log.flush()
    lines = await session.server_log.lines(after=window_start - 1, limit=1, containing=DONE_LINE)
    return bool(lines)


async def _wait_done(session: RunSession, window_start: int, load: asyncio.Task[CommandResult]) -> bool:
    """Until the server logs that the profile is done. A load that ended before the steps were reached leaves the
    profile open: it is stopped then, and what it recorded is written."""
    deadline = time.monotonic() + DONE_WAIT_S
    stopped = False
    while time.monotonic() < deadline:
        if await _done_logged(session, window_start):
            return True
        if load.done() and not stopped:
            stopped = True
            await session.api.post("/stop_profile")
        await asyncio.sleep(POLL_S)
    return await _done_logged(session, window_start)


def _stored_trace_bytes(run: Run) -> int:
    stored = ProfileTrace.objects.filter(run=run, state=ProfileTrace.State.STORED).aggregate(total=Sum("size_bytes"))
    return int(stored["total"] or 0)


async def _fetch_traces(session: RunSession, concurrency: int, out_dir: str, steps: int) -> bool:
    """Fetch, summarise and store the rank traces, at most the host's `run_trace_cap` bytes of them in all the run's
    profiles: True if every one was stored, False if some are left in `out_dir` on the host (over a limit)."""
    run, conn = session.run, session.require_conn()
    listing = await conn.run(
        f"find {shlex.quote(out_dir)} -maxdepth 1 -type f -name '*.trace.json.gz' -printf '%s %f\\n'", timeout=30
    )
    pattern = trace_name_pattern(run, concurrency)
    files = []
    for line in listing.stdout.splitlines():
        size_text, _, name = line.partition(" ")
        match = pattern.match(name)
        if match and size_text.isdigit():
            files.append((int(match[1]), name, int(size_text)))
    if not files:
        raise SSHError(f"no trace file of profile {profile_id(run, concurrency)} in {out_dir}")
    limit, cap = int(settings.SPECDASH_PROFILE_TRACE_MAX_BYTES), session.host.run_trace_cap
    stored = await db(_stored_trace_bytes)(run)
    over_cap: list[str] = []
    stored_all = True
    for rank, name, size in sorted(files)[:MAX_RANKS]:
        record = dict(file_name=name, size_bytes=size, steps=steps)
        if size <= limit and stored + size > cap:
            over_cap.append(name)
            stored_all = False
            message = (
                f"The trace {name} ({size:,} bytes) was not stored: the run's traces would pass this host's cap of "
                f"{cap // MIB} MiB a run ({stored:,} bytes stored). It stays on the host at {out_dir}/{name}."
            )
            await db(do_record_profile_trace)(
                run, concurrency, rank, state=ProfileTrace.State.REFUSED, message=message, **record
            )
            continue
        try:
            data = await conn.get_bytes(f"{out_dir}/{name}", min(limit, cap - stored))
        except FileTooLarge as exc:
            stored_all = False
            if exc.size <= limit:  # it grew past the cap's room since it was listed
                over_cap.append(name)
                message = f"The trace {name} ({exc.size:,} bytes) was not stored: past this host's cap a run."
                await db(do_record_profile_trace)(
                    run, concurrency, rank, state=ProfileTrace.State.REFUSED, message=message, **record
                )
                continue
            message = (
                f"The trace {name} is {exc.size:,} bytes, over the {limit:,}-byte limit "
                "(SPECDASH_PROFILE_TRACE_MAX_BYTES); it was not fetched. Profile fewer steps or raise the limit."
            )
            await db(do_record_profile_trace)(
                run, concurrency, rank, state=ProfileTrace.State.REFUSED, message=message, **record
            )
            await session.warn("profile", message)
            continue
        try:
            summary = await asyncio.to_thread(_summarise, data)
        except chrome_trace.TraceError as exc:
            stored_all = False
            message = f"The trace {name} could not be read: {exc}"
            await db(do_record_profile_trace)(
                run, concurrency, rank, state=ProfileTrace.State.FAILED, message=message, **record
            )
            await session.warn("profile", message)
            continue
        await db(do_record_profile_trace)(
            run, concurrency, rank, state=ProfileTrace.State.STORED, summary=summary, trace=data, **record
        )
        stored += len(data)
    if over_cap:
        await session.warn(
            TRACE_CAP_KIND,
            f"Profiler traces at concurrency {concurrency} past this host's cap of {cap // MIB} MiB a run were not "
            f"stored: {', '.join(over_cap)}. They stay on the host in {out_dir}.",
        )
    return stored_all


def _summarise(data: bytes) -> dict[str, object]:
    return trace_summary.summarise(chrome_trace.events(data))
