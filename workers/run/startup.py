"""From launch to ready: start the server (or pick a running one up again), then follow it through loading and
warm-up until `/health` answers 200 and `/v1/models` lists the model.

A silent server is told apart from a slow one by two clocks: the stall timeout (neither the log nor the port has
moved) makes a zombie, the readiness timeout a server that is alive but never got ready.
"""

from __future__ import annotations

import asyncio
import time

from experiments.models import Run

from . import adaptive, benchmark, server
from .errors import RunFailed
from .server_log import SERVER_EXITED
from .session import RunSession

READY_POLL_MIN, READY_POLL_MAX = 0.25, 1.0  # back-off while waiting; keeps detection within ~2 s
# How long a server must outlive a traceback, and then still answer, to have survived it.
SURVIVAL_GRACE = 5.0


async def launch(session: RunSession) -> None:
    conn = session.require_conn()
    log_path = f"{session.work_dir}/runs/run-{session.run.pk}.log"
    schedule = await adaptive.install(conn, session.work_dir, session.run.pk, session.config.adaptive_schedule_id)
    command = server.launch_command(session.host, session.config, adaptive_config=schedule)
    await benchmark.install_client(conn, session.work_dir)
    # The secrets' names only (their values are on the launch's stdin).
    shown = server.launch_command(session.host, session.config, for_display=True, adaptive_config=schedule)
    await session.advance(
        Run.State.LAUNCHING, server_port=session.host.server_port, log_path=log_path, launch_command=shown
    )
    started = await server.start(
        conn, session.work_dir, command, log_path, server.launch_secrets(session.host, session.config)
    )
    if isinstance(started, str):
        raise RunFailed(Run.FailureKind.PREFLIGHT, f"Could not start the server: {started}")
    pid, pgid = started
    session.pids_seen.add(pid)
    await session.update(remote_pid=pid, remote_pgid=pgid, remote_pids=sorted(session.pids_seen))
    await session.open_api()
    await session.server_log.follow(conn)
    await session.telemetry.start(conn)


async def reattach(session: RunSession) -> None:
    """Pick up a launched server again: forward its port, resume the log tail at the stored byte offset."""
    await session.resolve_work_dir()
    await session.open_api()
    await session.server_log.follow(session.require_conn())
    await session.telemetry.start(session.require_conn())
    if not await session.group_alive():
        failure = await session.server_log.failure(default_kind=Run.FailureKind.CRASHED, exited=True)
        if failure.message == SERVER_EXITED:
            failure.message = "The server exited while no worker was connected to the host."
        raise failure


async def wait_until_ready(session: RunSession) -> None:
    # The process is started: until the port answers it is loading weights (or capturing graphs).
    await session.advance_to(Run.State.LOADING)
    server_log, api, profile = session.server_log, session.api, session.profile
    warming_status = server_log.engine.warming_status
    started = time.monotonic()
    last_answer = started
    delay = READY_POLL_MIN
    while True:
        signal = server_log.failure_signal
        if signal is not None:
            if not await _survives(session, signal.kind):
                raise await server_log.failure(default_kind=signal.kind)
            await session.warn(
                "survived_traceback", f"The server logged a traceback while starting and served on: {signal.message}"
            )
            server_log.failure_signal = None
        server_log.raise_if_broken()
        if not await session.group_alive():
            raise await server_log.failure(default_kind=Run.FailureKind.CRASHED, exited=True)
        status = await api.status("/health")
        if status is not None:
            last_answer = time.monotonic()
        if (warming_status is not None and status == warming_status) or "http_started" in server_log.milestones:
            await session.advance_to(Run.State.WARMING)
        if status == 200:
            # What the tail has read but not yet stored may hold a traceback of the warm-up: judge it first.
            await server_log.flush()
            if server_log.failure_signal is not None:
                continue
            await session.advance_to(Run.State.WARMING)
            if not await api.served_models():
                raise RunFailed(Run.FailureKind.MISCONFIGURED, "/v1/models lists no model although /health is 200.")
            await session.advance(Run.State.READY)
            return
        now = time.monotonic()
        quiet_for = now - max(server_log.last_growth(default=started), last_answer)
        if quiet_for > profile.stall_timeout_s:
            raise RunFailed(
                Run.FailureKind.ZOMBIE,
                f"The server process lives but its log has not advanced and port {session.host.server_port} "
                f"has not answered for {int(quiet_for)} s.",
                *server_log.excerpt_of_last(8),
            )
        if now - started > profile.readiness_timeout_s:
            raise RunFailed(
                Run.FailureKind.READINESS_TIMEOUT,
                f"The server was not ready after {profile.readiness_timeout_s} s.",
                *server_log.excerpt_of_last(8),
            )
        # The log says when to look again (HTTP started, ready) sooner than the back-off would.
        if await server_log.next_milestone(delay):
            delay = READY_POLL_MIN
        else:
            delay = min(delay * 1.5, READY_POLL_MAX)


async def _survives(session: RunSession, kind: str) -> bool:
    """Whether the server survived the traceback it just logged: a request handler's exception (uvicorn's
    "Exception in ASGI application", a client that went away) is logged and the server serves on, while a scheduler
    that raised takes the whole group down within a second or two. Only a plain traceback can be survived; OOM or a
    context-length refusal is final whatever the processes do."""
    if kind != Run.FailureKind.CRASHED:
        await asyncio.sleep(0.5)  # let the rest of the traceback arrive
        return False
    deadline = time.monotonic() + SURVIVAL_GRACE
    while time.monotonic() < deadline:
        if not await session.group_alive():
            return False
        await asyncio.sleep(0.5)
    return await session.api.status("/health") is not None
