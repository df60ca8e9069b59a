"""The life of one run on its host: connect, preflight, launch, follow to ready, verify, benchmark, tear down.

Every fact needed to resume (state, pid/pgid, log byte offset, benchmark cell) is stored as soon as it is
known; nothing lives only in this process. Teardown always runs, after success, failure and cancel alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
import time
import traceback
from pathlib import Path
from typing import Any

import aiohttp
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

from experiments.actions.hosts import do_mark_host_dirty, do_release_host
from experiments.actions.review import do_check_history
from experiments.actions.runs import (
    do_advance_run,
    do_heartbeat,
    do_record_failure,
    do_record_measurement,
    do_update_run,
)
from experiments.models import LogChunk, Run

from . import benchrun, expectations, hosts, logfacts, preflight, server_process, sglang
from .failures import RunCancelled, RunFailed
from .hosts import HostReadError, host_access
from .runlog import SERVER_EXITED, RunLog
from .server_api import ServerApi
from .server_process import ServerGroup
from .ssh import (
    ConnectionLost,
    HostConnection,
    HostKeyMismatch,
    SSHError,
    env_assignments,
    quote_command,
)

log = logging.getLogger(__name__)

BENCHCLIENT_DIR = Path(__file__).resolve().parent / "benchclient"
READY_POLL_MIN, READY_POLL_MAX = 0.25, 1.0  # back-off while waiting; keeps detection within ~2 s
CANCEL_POLL = 1.0
SUPERSEDED, CANCELLED = "superseded", "cancelled"  # why the watcher stopped the phases


def _db(func):
    return sync_to_async(func, thread_sensitive=True)


async def drive_run(run_id: int) -> str:
    """Run the whole lifecycle of a claimed run; returns its final state."""
    run = await _db(Run.objects.select_related("host", "config", "experiment__profile").get)(pk=run_id)
    try:
        return await RunOrchestrator(run).execute()
    finally:
        # The ORM ran in sync_to_async's thread; its connection must not outlive this event loop.
        await _db(connections.close_all)()


class RunOrchestrator:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.host = run.host
        self.config = run.config
        self.profile = run.experiment.profile
        self.conn: HostConnection | None = None
        self.server_log = RunLog(run)
        self.api = ServerApi()
        self.work_dir = ""
        self.pids_seen: set[int] = set(run.remote_pids or [])

    # ---- the lifecycle -------------------------------------------------------------------------------

    async def execute(self) -> str:
        outcome = Run.State.SUCCEEDED
        phases = asyncio.create_task(self._phases())
        watcher = asyncio.create_task(self._watch())
        try:
            done, _ = await asyncio.wait({phases, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if watcher in done and not phases.done():
                phases.cancel()
                with contextlib.suppress(asyncio.CancelledError, RunCancelled):
                    await phases
                if watcher.result() == SUPERSEDED:
                    # Another worker re-attached while we were stalled: the run is its now; touch nothing.
                    log.warning("run %s: taken over by another worker; leaving it", self.run.pk)
                    await self._release_local_resources()
                    return SUPERSEDED
                outcome = Run.State.CANCELLED
            else:
                phases.result()
        except RunCancelled:
            outcome = Run.State.CANCELLED
        except RunFailed as failure:
            outcome = Run.State.FAILED
            await self._record_failure(failure)
        except Exception as exc:
            log.exception("run %s: orchestrator error", self.run.pk)
            outcome = Run.State.FAILED
            await self._record_failure(
                RunFailed(Run.FailureKind.INTERNAL, f"specdash error: {exc!r}", traceback.format_exc()[-4000:])
            )
        finally:
            watcher.cancel()
        if not await self._teardown():
            outcome = Run.State.FAILED
        elif outcome == Run.State.SUCCEEDED and self.run.failure_kind:
            outcome = Run.State.FAILED  # re-attached in teardown after a failure recorded by the previous worker
        elif outcome == Run.State.SUCCEEDED and self.run.cancel_requested:
            outcome = Run.State.CANCELLED
        await self._advance(outcome)
        if outcome == Run.State.SUCCEEDED:
            try:
                await _db(do_check_history)(self.run)
            except Exception:
                # A fault in the history check must not turn a measured run into a failed one.
                log.exception("run %s: history check failed", self.run.pk)
        return outcome

    async def _phases(self) -> None:
        """The phases from wherever the run is: a fresh run starts at the beginning, a re-attached one (new worker,
        or the same one after its SSH connection dropped) continues its phase against the running server."""
        reconnect_deadline: float | None = None
        while True:
            try:
                await self._connect(retrying=reconnect_deadline is not None)
                await self._continue()
                return
            except ConnectionLost as exc:
                now = time.monotonic()
                reconnect_deadline = reconnect_deadline or now + settings.SPECDASH_RECONNECT_WINDOW
                if now > reconnect_deadline:
                    raise RunFailed(
                        Run.FailureKind.SSH,
                        f"Lost the SSH connection and could not re-establish it within "
                        f"{settings.SPECDASH_RECONNECT_WINDOW:.0f} s: {exc}",
                    ) from exc
                log.warning("run %s: SSH connection lost (%s); reconnecting", self.run.pk, exc)
                await self._drop_connection()
                await asyncio.sleep(1)

    async def _continue(self) -> None:
        if self.run.state == Run.State.TEARDOWN:
            # The previous worker was tearing down: the server is meant to be gone; finish the job, and store the
            # log lines it had not stored yet (the tail drains the file and ends, the server being dead).
            self.work_dir = await self._resolve_work_dir()
            if self.run.log_path:
                await self.server_log.follow(self._require_conn())
            return
        if not self.run.remote_pgid:
            await self._preflight()
            await self._launch()
        else:
            await self._reattach()
        order = [str(state) for state in Run.LIFECYCLE]
        position = order.index(self.run.state) if self.run.state in order else len(order)
        if position <= order.index(Run.State.WARMING):
            await self._wait_until_ready()
        if position <= order.index(Run.State.VERIFYING):
            await self._verify()
        if position <= order.index(Run.State.BENCHMARKING):
            await self._benchmark()

    async def _watch(self) -> str:
        """Heartbeat every second; returns when the run is cancelled or another worker took it over."""
        while True:
            await asyncio.sleep(CANCEL_POLL)
            if not await _db(do_heartbeat)(self.run, self.run.worker):
                return SUPERSEDED
            if await _db(Run.objects.cancel_requested().filter(pk=self.run.pk).exists)():
                return CANCELLED

    # ---- phases --------------------------------------------------------------------------------------

    async def _connect(self, *, retrying: bool = False) -> None:
        if self.conn is not None:
            return
        try:
            self.conn = await HostConnection.open(host_access(self.host), timeout=settings.SPECDASH_CONNECT_TIMEOUT)
        except HostKeyMismatch as exc:
            raise RunFailed(Run.FailureKind.SSH, str(exc)) from exc
        except SSHError as exc:
            if retrying:
                raise ConnectionLost(str(exc)) from exc  # still inside the reconnect window
            raise RunFailed(Run.FailureKind.SSH, str(exc)) from exc

    async def _drop_connection(self) -> None:
        await self.server_log.stop_now()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
        self.conn = None

    async def _resolve_work_dir(self) -> str:
        work_dir = shlex.quote(self.host.work_dir)
        work = await self._require_conn().run(f"cd ~ && mkdir -p -- {work_dir}/runs && cd -- {work_dir} && pwd")
        if not work.ok:
            raise RunFailed(Run.FailureKind.PREFLIGHT, f"Cannot create the work directory: {work.stderr.strip()}")
        return work.stdout.strip().splitlines()[-1]

    async def _reattach(self) -> None:
        """Pick up a launched server again: forward its port, resume the log tail at the stored byte offset."""
        self.work_dir = await self._resolve_work_dir()
        await self._open_api()
        await self.server_log.follow(self._require_conn())
        if not await self._group_alive():
            failure = await self.server_log.failure(default_kind=Run.FailureKind.CRASHED, exited=True)
            if failure.message == SERVER_EXITED:
                failure.message = "The server exited while no worker was connected to the host."
            raise failure

    async def _preflight(self) -> None:
        await self._advance(Run.State.PREFLIGHT)
        conn = self._require_conn()
        self.work_dir = await self._resolve_work_dir()

        try:
            busy = await hosts.compute_apps(conn)
            if busy:
                raise RunFailed(Run.FailureKind.PREFLIGHT, preflight.describe_busy_gpus(busy))

            port = self.host.server_port
            probe = await conn.run(f"(exec 3<>/dev/tcp/127.0.0.1/{int(port)}) 2>/dev/null && echo taken || echo free")
            if probe.stdout.strip().endswith("taken"):
                raise RunFailed(Run.FailureKind.PREFLIGHT, f"Port {port} on {self.host.name} is already in use.")

            target = await hosts.model_config(conn, self.host.name, self.config.model_path, "target")
            if not self.config.speculative_draft_model_path:
                return
            draft_path = self.config.speculative_draft_model_path
            draft = await hosts.model_config(conn, self.host.name, draft_path, "draft")
        except HostReadError as exc:
            raise RunFailed(Run.FailureKind.PREFLIGHT, str(exc)) from exc
        context_length = sglang.flag_int(self.config.extra_args, "--context-length")
        problem = preflight.context_length_problem(
            target, draft, context_length=context_length, env=self.config.env
        ) or preflight.vocab_problem(target, draft)
        if problem:
            raise RunFailed(Run.FailureKind.PREFLIGHT, problem)

    async def _launch(self) -> None:
        conn = self._require_conn()
        port = self.host.server_port
        log_path = f"{self.work_dir}/runs/run-{self.run.pk}.log"
        argv = [
            *shlex.split(self.host.launcher),
            *sglang.launch_argv(self.config.launch_spec(), host="127.0.0.1", port=port),
        ]
        # PYTHONUNBUFFERED: uvicorn's access lines go to stdout, block-buffered when redirected to a file.
        env = {"PYTHONUNBUFFERED": "1", **self.config.env}
        command = quote_command(["env", *env_assignments(env), *argv])
        await conn.put_tree(BENCHCLIENT_DIR, f"{self.work_dir}/{benchrun.REMOTE_DIR}")
        await self._advance(Run.State.LAUNCHING, server_port=port, log_path=log_path, launch_command=command)
        started = await server_process.start(conn, self.work_dir, command, log_path)
        if isinstance(started, str):
            raise RunFailed(Run.FailureKind.PREFLIGHT, f"Could not start the server: {started}")
        pid, pgid = started
        self.pids_seen.add(pid)
        await _db(do_update_run)(self.run, remote_pid=pid, remote_pgid=pgid, remote_pids=sorted(self.pids_seen))
        await self._open_api()
        await self.server_log.follow(self._require_conn())

    async def _open_api(self) -> None:
        await self.api.open(self._require_conn(), int(self.run.server_port or self.host.server_port))

    async def _wait_until_ready(self) -> None:
        # The process is started: until the port answers it is loading weights (or capturing graphs).
        await self._advance_to(Run.State.LOADING)
        started = time.monotonic()
        last_answer = started
        delay = READY_POLL_MIN
        while True:
            if self.server_log.failure_signal is not None:
                await asyncio.sleep(0.5)  # let the rest of the traceback arrive
                raise await self.server_log.failure(default_kind=self.server_log.failure_signal.kind)
            self.server_log.raise_if_broken()
            if not await self._group_alive():
                raise await self.server_log.failure(default_kind=Run.FailureKind.CRASHED, exited=True)
            status = await self.api.status("/health")
            if status is not None:
                last_answer = time.monotonic()
            if status == 503 or "http_started" in self.server_log.milestones:
                await self._advance_to(Run.State.WARMING)
            if status == 200:
                await self._advance_to(Run.State.WARMING)
                await self._confirm_model()
                await self._advance(Run.State.READY)
                return
            now = time.monotonic()
            quiet_for = now - max(self.server_log.last_growth(default=started), last_answer)
            if quiet_for > self.profile.stall_timeout_s:
                raise RunFailed(
                    Run.FailureKind.ZOMBIE,
                    f"The server process lives but its log has not advanced and port {self.host.server_port} "
                    f"has not answered for {int(quiet_for)} s.",
                    *self.server_log.excerpt_of_last(8),
                )
            if now - started > self.profile.readiness_timeout_s:
                raise RunFailed(
                    Run.FailureKind.READINESS_TIMEOUT,
                    f"The server was not ready after {self.profile.readiness_timeout_s} s.",
                    *self.server_log.excerpt_of_last(8),
                )
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, READY_POLL_MAX)

    async def _raise_if_server_died(self, wait: float = 3.0) -> None:
        """A request that failed because the server crashed is a crash, with the traceback that proves it.

        The failed request usually comes back before the server's process group is gone, so watch for a while.
        A traceback alone does not make a crash: servers log non-fatal ones (a client that went away) and go on.
        """
        deadline = time.monotonic() + wait
        while True:
            if not await self._group_alive():
                signal = self.server_log.failure_signal
                kind = signal.kind if signal else Run.FailureKind.CRASHED
                raise await self.server_log.failure(default_kind=kind, exited=True)
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.25)

    async def _confirm_model(self) -> None:
        data = await self.api.get_json("/v1/models")
        models = (data or {}).get("data") or []
        if not models:
            raise RunFailed(Run.FailureKind.MISCONFIGURED, "/v1/models lists no model although /health is 200.")

    async def _verify(self) -> None:
        await self._advance(Run.State.VERIFYING)
        info = await self.api.server_info()
        effective = {k: v for k, v in (info or self.server_log.server_args_dump).items() if k != "internal_states"}
        await _db(do_update_run)(self.run, effective_args=effective)
        problems = expectations.server_arg_problems(self.config.launch_spec(), self.config.expect or {}, effective)
        await self.server_log.flush()
        for text in (self.config.expect or {}).get("log_contains", []):
            if not await _db(_log_contains)(self.run.pk, text):
                problems.append(f"expected the log to contain {text!r}; it does not")
        if problems:
            raise RunFailed(Run.FailureKind.MISCONFIGURED, "; ".join(problems))
        await self._check_env_propagated()
        await self._smoke_test()

    async def _check_env_propagated(self) -> None:
        wanted = list((self.config.expect or {}).get("env_propagated", []))
        if not wanted:
            return
        group = self._group()
        missing, unreadable = expectations.env_problems(wanted, await group.processes() if group else [])
        if missing:
            raise RunFailed(
                Run.FailureKind.ENV_NOT_PROPAGATED,
                "Environment variables did not reach every server process: " + "; ".join(missing),
            )
        if unreadable:
            note = {"env_check_unreadable_pids": unreadable}
            await _db(do_update_run)(self.run, effective_args={**self.run.effective_args, **note})

    async def _smoke_test(self) -> None:
        body = {
            "text": "The capital city of France is",
            "sampling_params": {"max_new_tokens": 8, "temperature": 0},
        }
        try:
            status, text = await self.api.generate(body)
        except (aiohttp.ClientError, TimeoutError) as exc:
            await self._raise_if_server_died()
            raise RunFailed(Run.FailureKind.SMOKE_FAILED, f"The smoke generation failed: {exc!r}") from exc
        tokens = 0
        with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
            tokens = int(json.loads(text)["meta_info"]["completion_tokens"])
        if status != 200 or tokens <= 0:
            await self._raise_if_server_died()
            raise RunFailed(
                Run.FailureKind.SMOKE_FAILED,
                f"The smoke generation returned HTTP {status} with {tokens} tokens: {text[:300]}",
            )

    async def _benchmark(self) -> None:
        await self._advance(Run.State.BENCHMARKING)
        profile = self.profile
        cells = [(p, c) for p in range(profile.passes) for c in profile.concurrency]
        for index, (pass_index, concurrency) in enumerate(cells):
            if index < self.run.benchmark_cell:
                continue  # done before a re-attach
            # /flush_cache also resets the server's accept-length counters (SGLang 0.5.9), so what
            # /get_server_info reports after the cell is this cell's alone.
            await self.api.post("/flush_cache")
            window_start = self.run.log_lines + 1
            result = await self._run_benchclient(concurrency)
            result.update(await self._server_figures(window_start))
            await _db(do_record_measurement)(self.run, pass_index, concurrency, result)
            if result.get("failed"):
                # Kept for the record, but a cell with failed requests measures the failures, not the speed.
                await self._raise_if_server_died()
                errors = "; ".join(result.get("errors") or [])
                raise RunFailed(
                    Run.FailureKind.BENCHMARK_FAILED,
                    f"{result['failed']} of {result['failed'] + result['completed']} requests failed at "
                    f"concurrency {concurrency}: {errors}",
                )
            await _db(do_update_run)(self.run, benchmark_cell=index + 1)

    async def _server_figures(self, window_start: int) -> dict[str, Any]:
        """The server's own view of the cell just run: its accept length and its Decode-batch log lines."""
        await asyncio.sleep(settings.SPECDASH_LOG_BATCH_SECONDS * 2)  # let the tail store the cell's last lines
        await self.server_log.flush()
        info = await self.api.server_info() or {}
        states = info.get("internal_states") or [{}]
        accept = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
        lines = await _db(LogChunk.objects.lines)(
            self.run.pk, after=window_start - 1, limit=min(max(self.run.log_lines - window_start + 1, 1), 500_000)
        )
        summary = logfacts.decode_summary(window_start, [line["text"] for line in lines])
        return {"server_accept_length": accept if isinstance(accept, int | float) else None, "server_decode": summary}

    async def _run_benchclient(self, concurrency: int) -> dict[str, Any]:
        result = await self._require_conn().run(
            benchrun.command(self.host, self.profile, concurrency, self.work_dir),
            timeout=benchrun.timeout(self.profile, concurrency),
        )
        data = benchrun.result(result.stdout)
        if not result.ok or data is None or not data.get("completed"):
            await self._raise_if_server_died()
            errors = "; ".join((data or {}).get("errors") or []) or result.stderr_tail()
            raise RunFailed(
                Run.FailureKind.BENCHMARK_FAILED,
                f"The benchmark at concurrency {concurrency} failed (exit {result.exit_status}): {errors}",
            )
        return data

    # ---- teardown ------------------------------------------------------------------------------------

    async def _teardown(self) -> bool:
        """Stop the server group and prove the GPUs are free; False if memory of ours stays held."""
        await self._advance(Run.State.TEARDOWN)
        clean = True
        try:
            if self.conn is not None and self.run.remote_pgid:
                clean = await self._stop_server_group()
        except SSHError as exc:
            clean = False
            await self._record_failure(
                RunFailed(Run.FailureKind.TEARDOWN_INCOMPLETE, f"Teardown could not finish over SSH: {exc}")
            )
            await _db(do_mark_host_dirty)(self.host, f"run {self.run.pk}: teardown failed: {exc}")
        finally:
            await self.server_log.finish()
            await self._release_local_resources()
            await _db(do_release_host)(self.run)
        return clean

    async def _release_local_resources(self) -> None:
        await self.server_log.stop_now()
        await self.api.close()
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def _stop_server_group(self) -> bool:
        group = self._group()
        assert group is not None
        self.pids_seen.update(await group.pids())
        await group.stop(settings.SPECDASH_TEARDOWN_GRACE)
        await _db(do_update_run)(self.run, remote_pids=sorted(self.pids_seen), notify=False)
        try:
            held = [app for app in await hosts.compute_apps(group.conn) if app.pid in self.pids_seen]
        except HostReadError as exc:
            held_text = str(exc)
        else:
            if not held:
                return True
            held_text = ", ".join(f"pid {a.pid} still holds {a.used_mib} MiB" for a in held)
        await self._record_failure(
            RunFailed(Run.FailureKind.TEARDOWN_INCOMPLETE, f"GPU memory is still held after SIGKILL: {held_text}")
        )
        await _db(do_mark_host_dirty)(self.host, f"run {self.run.pk}: {held_text}")
        return False

    # ---- helpers -------------------------------------------------------------------------------------

    def _require_conn(self) -> HostConnection:
        if self.conn is None:
            raise RunFailed(Run.FailureKind.SSH, "Not connected to the host.")
        return self.conn

    async def _advance(self, state: str, **facts: Any) -> None:
        if self.run.state == state and not facts:
            return
        await _db(do_advance_run)(self.run, state, **facts)

    async def _advance_to(self, state: str) -> None:
        """Advance only forwards along the lifecycle (warming may be seen from the log and HTTP alike)."""
        order = [str(s) for s in Run.LIFECYCLE]
        if self.run.state in order and order.index(self.run.state) < order.index(state):
            await self._advance(state)

    async def _record_failure(self, failure: RunFailed) -> None:
        await _db(do_record_failure)(self.run, failure.kind, failure.message, failure.excerpt, failure.first_line)

    def _group(self) -> ServerGroup | None:
        """The launched server's process group, through the current connection; None before the launch."""
        pgid = self.run.remote_pgid
        return ServerGroup(self._require_conn(), int(pgid)) if pgid else None

    async def _group_alive(self) -> bool:
        group = self._group()
        return group is not None and await group.alive()


def _log_contains(run_id: int, text: str) -> bool:
    return LogChunk.objects.filter(run_id=run_id, text__contains=text).exists()
