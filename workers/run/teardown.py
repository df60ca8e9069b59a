"""Teardown, after success, failure and cancel alike: stop the server's whole process group (SIGTERM, then SIGKILL)
and prove with nvidia-smi that none of its processes still holds GPU memory; a host where one does is marked
dirty, so that no later run launches onto GPUs it cannot have."""

from __future__ import annotations

from django.conf import settings

from experiments.actions.hosts import do_mark_host_dirty, do_release_host
from experiments.models import Run

from .. import hosts
from ..ssh import SSHError
from . import benchmark
from .errors import RunFailed
from .session import RunSession, db


async def tear_down(session: RunSession) -> bool:
    """Stop the server group and prove the GPUs are free; False if memory of ours stays held."""
    await session.advance(Run.State.TEARDOWN)
    await session.telemetry.stop()  # the shutdown is not part of what the run measured
    clean = True
    try:
        if session.conn is not None and session.work_dir and _reached_benchmarking(session.run):
            await benchmark.stop_client(session)
        if session.conn is not None and session.run.remote_pgid:
            clean = await _stop_server_group(session)
    except SSHError as exc:
        clean = False
        await session.record_failure(
            RunFailed(Run.FailureKind.TEARDOWN_INCOMPLETE, f"Teardown could not finish over SSH: {exc}")
        )
        await db(do_mark_host_dirty)(session.host, f"run {session.run.pk}: teardown failed: {exc}")
    finally:
        await session.server_log.finish()
        await session.release_local_resources()
        await db(do_release_host)(session.run)
    return clean


def _reached_benchmarking(run: Run) -> bool:
    return any(entry["state"] == Run.State.BENCHMARKING for entry in run.timeline)


async def resume_interrupted(session: RunSession) -> None:
    """The previous worker was tearing down: the server is meant to be gone. Store the log lines it had not stored
    yet (the tail drains the file and ends, the server being dead); `tear_down` then finishes the job."""
    await session.resolve_work_dir()
    if session.run.log_path:
        await session.server_log.follow(session.require_conn())


async def _stop_server_group(session: RunSession) -> bool:
    group = session.group()
    assert group is not None
    session.pids_seen.update(await group.pids())
    await group.stop(settings.SPECDASH_TEARDOWN_GRACE)
    await session.update(remote_pids=sorted(session.pids_seen), notify=False)
    try:
        held = [app for app in await hosts.compute_apps(group.conn) if app.pid in session.pids_seen]
    except hosts.HostReadError as exc:
        held_text = str(exc)
    else:
        if not held:
            return True
        held_text = ", ".join(f"pid {a.pid} still holds {a.used_mib} MiB" for a in held)
    await session.record_failure(
        RunFailed(Run.FailureKind.TEARDOWN_INCOMPLETE, f"GPU memory is still held after SIGKILL: {held_text}")
    )
    await db(do_mark_host_dirty)(session.host, f"run {session.run.pk}: {held_text}")
    return False
