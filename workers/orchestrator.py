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
from collections import deque
from pathlib import Path
from typing import Any

import aiohttp
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

from experiments import actions, broadcast
from experiments.models import Host, LogChunk, Run

from . import logfacts, preflight, sglang
from .logtail import LogTail
from .ssh import (
    CommandResult,
    ConnectionLost,
    HostAccess,
    HostConnection,
    HostKeyMismatch,
    SSHError,
    env_assignments,
    quote_command,
)

log = logging.getLogger(__name__)

BENCHCLIENT_DIR = Path(__file__).resolve().parent / "benchclient"
RECENT_LINES = 400  # kept in memory to cut the excerpt that proves a failure
READY_POLL_MIN, READY_POLL_MAX = 0.25, 1.0  # back-off while waiting; keeps detection within ~2 s
CANCEL_POLL = 1.0
SERVER_EXITED = "The server process group exited."
SUPERSEDED, CANCELLED = "superseded", "cancelled"  # why the watcher stopped the phases
EXCERPT_CONTEXT = 3


class RunFailed(Exception):
    def __init__(self, kind: str, message: str, excerpt: str = "", first_line: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.excerpt = excerpt
        self.first_line = first_line


class RunCancelled(Exception):
    pass


def host_access(host: Host) -> HostAccess:
    key_path = Path(settings.SPECDASH_SSH_KEY_DIR) / host.key_name if host.key_name else None
    return HostAccess(
        name=host.name,
        address=host.address,
        port=host.port,
        username=host.username,
        key_path=key_path,
        host_key=host.host_key,
        shell_setup=host.shell_setup,
        work_dir=host.work_dir,
    )


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
        self.tail: LogTail | None = None
        self.tail_task: asyncio.Task | None = None
        self.http: aiohttp.ClientSession | None = None
        self.base_url = ""
        self.work_dir = ""
        self.recent: deque[tuple[int, str]] = deque(maxlen=RECENT_LINES)
        self.milestones: set[str] = set()
        self.failure_signal: sglang.FailureSignal | None = None
        self.server_args_dump: dict[str, Any] = {}
        self.pids_seen: set[int] = set(run.remote_pids or [])
        self.facts = logfacts.LogFacts(self.config.log_metrics or {})

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
                await _db(actions.do_check_history)(self.run)
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
                await self._restart_tail()
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
            if not await _db(actions.do_heartbeat)(self.run, self.run.worker):
                return SUPERSEDED
            if await _db(actions.is_cancel_requested)(self.run.pk):
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
        await self._stop_tail_now()
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
        await self._open_http()
        await self._restart_tail()
        if not await self._group_alive():
            failure = await self._failure_from_log(default_kind=Run.FailureKind.CRASHED, exited=True)
            if failure.message == SERVER_EXITED:
                failure.message = "The server exited while no worker was connected to the host."
            raise failure

    async def _preflight(self) -> None:
        await self._advance(Run.State.PREFLIGHT)
        conn = self._require_conn()
        self.work_dir = await self._resolve_work_dir()

        apps = await conn.run("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits")
        if not apps.ok:
            raise RunFailed(Run.FailureKind.PREFLIGHT, f"nvidia-smi failed on the host: {_tail(apps.stderr)}")
        busy = preflight.parse_compute_apps(apps.stdout)
        if busy:
            raise RunFailed(Run.FailureKind.PREFLIGHT, preflight.describe_busy_gpus(busy))

        port = self.host.server_port
        probe = await conn.run(f"(exec 3<>/dev/tcp/127.0.0.1/{int(port)}) 2>/dev/null && echo taken || echo free")
        if probe.stdout.strip().endswith("taken"):
            raise RunFailed(Run.FailureKind.PREFLIGHT, f"Port {port} on {self.host.name} is already in use.")

        target = await self._read_model_config(self.config.model_path, "target")
        if self.config.speculative_draft_model_path:
            draft = await self._read_model_config(self.config.speculative_draft_model_path, "draft")
            context_length = _flag_value(self.config.extra_args, "--context-length")
            problem = preflight.context_length_problem(
                target, draft, context_length=context_length, env=self.config.env
            ) or preflight.vocab_problem(target, draft)
            if problem:
                raise RunFailed(Run.FailureKind.PREFLIGHT, problem)

    async def _read_model_config(self, path: str, role: str) -> dict[str, Any]:
        result = await self._require_conn().run(f"cat -- {shlex.quote(path.rstrip('/') + '/config.json')}")
        if not result.ok:
            raise RunFailed(
                Run.FailureKind.PREFLIGHT,
                f"The {role} model path {path} has no readable config.json on {self.host.name}: {_tail(result.stderr)}",
            )
        try:
            data = json.loads(result.stdout)
        except json.JSONDecodeError as exc:
            raise RunFailed(Run.FailureKind.PREFLIGHT, f"The {role} model's config.json is not JSON: {exc}") from exc
        return data if isinstance(data, dict) else {}

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
        await conn.put_tree(BENCHCLIENT_DIR, f"{self.work_dir}/.specdash")
        await self._advance(Run.State.LAUNCHING, server_port=port, log_path=log_path, launch_command=command)
        # setsid: the server leads its own process group, which survives our SSH session and is killed whole.
        started = await conn.run(
            f"cd -- {shlex.quote(self.work_dir)} && "
            f"{{ setsid {command} > {shlex.quote(log_path)} 2>&1 < /dev/null & }} && echo $!"
        )
        pid_text = started.stdout.strip().splitlines()[-1] if started.stdout.strip() else ""
        if not started.ok or not pid_text.isdigit():
            raise RunFailed(Run.FailureKind.PREFLIGHT, f"Could not start the server: {_tail(started.stderr)}")
        pid = int(pid_text)
        pgid_result = await conn.run(f"ps -o pgid= -p {pid}")
        pgid = int(pgid_result.stdout.strip()) if pgid_result.stdout.strip().isdigit() else pid
        self.pids_seen.add(pid)
        await _db(actions.do_update_run)(self.run, remote_pid=pid, remote_pgid=pgid, remote_pids=sorted(self.pids_seen))
        await self._open_http()
        await self._restart_tail()

    async def _open_http(self) -> None:
        """HTTP to the server's loopback port, through this SSH connection (a new one after a reconnect)."""
        port = await self._require_conn().forward_port(int(self.run.server_port or self.host.server_port))
        self.base_url = f"http://127.0.0.1:{port}"
        if self.http is None:
            self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def _restart_tail(self) -> None:
        """Follow the log from the stored byte offset: complete lines only, so nothing is lost or repeated."""
        await self._stop_tail_now()
        self.tail = LogTail(
            self._require_conn(),
            self.run.log_path,
            offset=self.run.log_offset,
            next_line=self.run.log_lines + 1,
            on_batch=self._on_log_batch,
            batch_lines=settings.SPECDASH_LOG_BATCH_LINES,
            batch_seconds=settings.SPECDASH_LOG_BATCH_SECONDS,
        )
        self.tail_task = asyncio.create_task(self.tail.follow(stop_when_pid_exits=self.run.remote_pid))

    async def _stop_tail_now(self) -> None:
        if self.tail_task is None:
            return
        self.tail_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.tail_task  # its `finally` stores what it had read
        self.tail_task = None

    async def _on_log_batch(self, first_line: int, lines: list[str], offset: int) -> None:
        """Store, then broadcast, then learn: storage first so a browser can always refill from it."""
        await _db(actions.do_append_log)(self.run, first_line, lines, offset)
        await broadcast.send_log_lines(self.run.pk, first_line, lines)
        self.recent.extend(enumerate(lines, start=first_line))
        facts = self.facts.read(first_line, lines)
        self.milestones |= facts.milestones
        if facts.failure is not None and self.failure_signal is None:
            self.failure_signal = facts.failure
        if facts.server_args is not None:
            self.server_args_dump = facts.server_args
        changes: dict[str, Any] = {}
        if facts.progress is not None and facts.progress != self.run.loading_progress:
            changes["loading_progress"] = facts.progress
        if facts.has_series:
            changes["live_facts"] = logfacts.merge_series(self.run.live_facts, facts)
            await broadcast.send_run_facts(self.run.pk, facts.decode, facts.metrics)
        if changes:
            await _db(actions.do_update_run)(self.run, notify="loading_progress" in changes, **changes)

    async def _wait_until_ready(self) -> None:
        # The process is started: until the port answers it is loading weights (or capturing graphs).
        await self._advance_to(Run.State.LOADING)
        started = time.monotonic()
        last_answer = started
        delay = READY_POLL_MIN
        while True:
            if self.failure_signal is not None:
                await asyncio.sleep(0.5)  # let the rest of the traceback arrive
                raise await self._failure_from_log(default_kind=self.failure_signal.kind)
            self._raise_if_tail_broke()
            if not await self._group_alive():
                raise await self._failure_from_log(default_kind=Run.FailureKind.CRASHED, exited=True)
            status = await self._http_status("/health")
            if status is not None:
                last_answer = time.monotonic()
            if status == 503 or "http_started" in self.milestones:
                await self._advance_to(Run.State.WARMING)
            if status == 200:
                await self._advance_to(Run.State.WARMING)
                await self._confirm_model()
                await self._advance(Run.State.READY)
                return
            now = time.monotonic()
            quiet_for = now - max(self.tail.last_growth if self.tail else started, last_answer)
            if quiet_for > self.profile.stall_timeout_s:
                raise RunFailed(
                    Run.FailureKind.ZOMBIE,
                    f"The server process lives but its log has not advanced and port {self.host.server_port} "
                    f"has not answered for {int(quiet_for)} s.",
                    *self._excerpt_of_last(8),
                )
            if now - started > self.profile.readiness_timeout_s:
                raise RunFailed(
                    Run.FailureKind.READINESS_TIMEOUT,
                    f"The server was not ready after {self.profile.readiness_timeout_s} s.",
                    *self._excerpt_of_last(8),
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
                kind = self.failure_signal.kind if self.failure_signal else Run.FailureKind.CRASHED
                raise await self._failure_from_log(default_kind=kind, exited=True)
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.25)

    def _raise_if_tail_broke(self) -> None:
        """A dead tail would look like a silent server (a false zombie); say what really broke."""
        task = self.tail_task
        if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
            raise RunFailed(Run.FailureKind.INTERNAL, f"Following the server log failed: {task.exception()!r}")

    async def _confirm_model(self) -> None:
        data = await self._get_json("/v1/models")
        models = (data or {}).get("data") or []
        if not models:
            raise RunFailed(Run.FailureKind.MISCONFIGURED, "/v1/models lists no model although /health is 200.")

    async def _verify(self) -> None:
        await self._advance(Run.State.VERIFYING)
        info = await self._get_json("/get_server_info")
        if info is None:
            info = await self._get_json("/server_info")
        effective = {k: v for k, v in (info or self.server_args_dump).items() if k != "internal_states"}
        await _db(actions.do_update_run)(self.run, effective_args=effective)
        problems = _arg_mismatches(self.config.launch_spec(), effective)
        expected_args = (self.config.expect or {}).get("server_args", {})
        for key, want in expected_args.items():
            if key not in effective:
                problems.append(f"expected server arg {key}={want!r}, but the server does not report {key}")
            elif effective[key] != want:
                problems.append(f"expected server arg {key}={want!r}, the server runs {key}={effective[key]!r}")
        if self.tail:
            await self.tail.flush()
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
        missing: list[str] = []
        unreadable: list[int] = []
        for pid in await self._group_pids():
            result = await self._require_conn().run(
                f"ps -o args= -p {pid} | head -c 200; echo; tr '\\0' '\\n' < /proc/{pid}/environ 2>/dev/null"
            )
            lines = result.stdout.splitlines()
            if not lines or not lines[0].strip():
                continue  # exited meanwhile
            title, env_names = lines[0].strip(), {line.split("=", 1)[0] for line in lines[1:] if "=" in line}
            if not env_names:
                # setproctitle (used by SGLang for its scheduler titles) zeroes the environ block the kernel
                # shows; an empty block proves nothing either way.
                unreadable.append(pid)
                continue
            absent = [v for v in wanted if v not in env_names]
            if absent:
                missing.append(f"{', '.join(absent)} missing in pid {pid} ({title})")
        if missing:
            raise RunFailed(
                Run.FailureKind.ENV_NOT_PROPAGATED,
                "Environment variables did not reach every server process: " + "; ".join(missing),
            )
        if unreadable:
            note = {"env_check_unreadable_pids": unreadable}
            await _db(actions.do_update_run)(self.run, effective_args={**self.run.effective_args, **note})

    async def _smoke_test(self) -> None:
        body = {
            "text": "The capital city of France is",
            "sampling_params": {"max_new_tokens": 8, "temperature": 0},
        }
        try:
            assert self.http is not None
            async with self.http.post(self.base_url + "/generate", json=body) as response:
                text = await response.text()
                status = response.status
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
            await self._post("/flush_cache")
            window_start = self.run.log_lines + 1
            result = await self._run_benchclient(concurrency)
            result.update(await self._server_figures(window_start))
            await _db(actions.do_record_measurement)(self.run, pass_index, concurrency, result)
            if result.get("failed"):
                # Kept for the record, but a cell with failed requests measures the failures, not the speed.
                await self._raise_if_server_died()
                errors = "; ".join(result.get("errors") or [])
                raise RunFailed(
                    Run.FailureKind.BENCHMARK_FAILED,
                    f"{result['failed']} of {result['failed'] + result['completed']} requests failed at "
                    f"concurrency {concurrency}: {errors}",
                )
            await _db(actions.do_update_run)(self.run, benchmark_cell=index + 1)

    async def _server_figures(self, window_start: int) -> dict[str, Any]:
        """The server's own view of the cell just run: its accept length and its Decode-batch log lines."""
        await asyncio.sleep(settings.SPECDASH_LOG_BATCH_SECONDS * 2)  # let the tail store the cell's last lines
        if self.tail is not None:
            await self.tail.flush()
        info = await self._get_json("/get_server_info") or await self._get_json("/server_info") or {}
        states = info.get("internal_states") or [{}]
        accept = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
        lines = await _db(LogChunk.objects.lines)(
            self.run.pk, after=window_start - 1, limit=min(max(self.run.log_lines - window_start + 1, 1), 500_000)
        )
        summary = logfacts.decode_summary(window_start, [line["text"] for line in lines])
        return {"server_accept_length": accept if isinstance(accept, int | float) else None, "server_decode": summary}

    async def _post(self, path: str) -> int | None:
        assert self.http is not None
        try:
            async with self.http.post(self.base_url + path) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def _run_benchclient(self, concurrency: int) -> dict[str, Any]:
        profile = self.profile
        argv = [
            *shlex.split(self.host.python),
            "-m",
            "benchclient",
            "--base-url",
            f"http://127.0.0.1:{self.host.server_port}",
            "--concurrency",
            str(concurrency),
            "--num-prompts",
            str(profile.num_prompts),
            "--input-len",
            str(profile.input_len),
            "--output-len",
            str(profile.output_len),
            "--seed",
            str(profile.seed),
            "--warmup-requests",
            str(profile.warmup_requests),
            "--request-timeout",
            str(profile.request_timeout_s),
        ]
        result: CommandResult = await self._require_conn().run(
            f"cd -- {shlex.quote(self.work_dir + '/.specdash')} && {quote_command(argv)}",
            timeout=profile.request_timeout_s * max(1, profile.num_prompts // concurrency + 1) + 60,
        )
        data = _last_json_object(result.stdout)
        if not result.ok or data is None or not data.get("completed"):
            await self._raise_if_server_died()
            errors = "; ".join((data or {}).get("errors") or []) or _tail(result.stderr)
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
            await _db(actions.do_mark_host_dirty)(self.host, f"run {self.run.pk}: teardown failed: {exc}")
        finally:
            await self._finish_tail()
            await self._release_local_resources()
            await _db(actions.do_release_host)(self.run)
        return clean

    async def _release_local_resources(self) -> None:
        await self._stop_tail_now()
        if self.http is not None:
            await self.http.close()
            self.http = None
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def _stop_server_group(self) -> bool:
        conn = self._require_conn()
        pgid = int(self.run.remote_pgid or 0)
        self.pids_seen.update(await self._group_pids())
        await conn.run(f"kill -TERM -- -{pgid} 2>/dev/null; true")
        if not await self._wait_group_gone(settings.SPECDASH_TEARDOWN_GRACE):
            await conn.run(f"kill -KILL -- -{pgid} 2>/dev/null; true")
            await self._wait_group_gone(10)
        await _db(actions.do_update_run)(self.run, remote_pids=sorted(self.pids_seen), notify=False)
        apps = await conn.run("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits")
        held = [a for a in preflight.parse_compute_apps(apps.stdout) if a.pid in self.pids_seen]
        if not apps.ok:
            held_text = f"nvidia-smi failed: {_tail(apps.stderr)}"
        elif held:
            held_text = ", ".join(f"pid {a.pid} still holds {a.used_mib} MiB" for a in held)
        else:
            return True
        await self._record_failure(
            RunFailed(Run.FailureKind.TEARDOWN_INCOMPLETE, f"GPU memory is still held after SIGKILL: {held_text}")
        )
        await _db(actions.do_mark_host_dirty)(self.host, f"run {self.run.pk}: {held_text}")
        return False

    async def _wait_group_gone(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not await self._group_alive():
                return True
            await asyncio.sleep(0.25)
        return not await self._group_alive()

    async def _finish_tail(self) -> None:
        if self.tail_task is None:
            return
        # The tail ends by itself once the server is gone and the file is drained (tail --pid).
        try:
            await asyncio.wait_for(asyncio.shield(self.tail_task), 5)
        except (TimeoutError, Exception):
            self.tail_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.tail_task

    # ---- helpers -------------------------------------------------------------------------------------

    def _require_conn(self) -> HostConnection:
        if self.conn is None:
            raise RunFailed(Run.FailureKind.SSH, "Not connected to the host.")
        return self.conn

    async def _advance(self, state: str, **facts: Any) -> None:
        if self.run.state == state and not facts:
            return
        await _db(actions.do_advance_run)(self.run, state, **facts)

    async def _advance_to(self, state: str) -> None:
        """Advance only forwards along the lifecycle (warming may be seen from the log and HTTP alike)."""
        order = [str(s) for s in Run.LIFECYCLE]
        if self.run.state in order and order.index(self.run.state) < order.index(state):
            await self._advance(state)

    async def _record_failure(self, failure: RunFailed) -> None:
        await _db(actions.do_record_failure)(
            self.run, failure.kind, failure.message, failure.excerpt, failure.first_line
        )

    async def _group_alive(self) -> bool:
        pgid = self.run.remote_pgid
        if not pgid:
            return False
        result = await self._require_conn().run(f"kill -0 -- -{int(pgid)} 2>/dev/null && echo alive || echo gone")
        return result.stdout.strip().endswith("alive")

    async def _group_pids(self) -> list[int]:
        pgid = self.run.remote_pgid
        if not pgid:
            return []
        result = await self._require_conn().run(f"pgrep -g {int(pgid)} || true")
        return [int(p) for p in result.stdout.split() if p.isdigit()]

    async def _http_status(self, path: str) -> int | None:
        """The HTTP status, or None while nothing answers on the port (loading)."""
        assert self.http is not None
        try:
            async with self.http.get(self.base_url + path, timeout=aiohttp.ClientTimeout(total=5)) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError, ConnectionError):
            return None

    async def _get_json(self, path: str) -> dict[str, Any] | None:
        assert self.http is not None
        try:
            async with self.http.get(self.base_url + path) as response:
                if response.status != 200:
                    return None
                data = await response.json(content_type=None)
                return data if isinstance(data, dict) else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def _failure_from_log(self, *, default_kind: str, exited: bool = False) -> RunFailed:
        if exited and self.tail_task is not None:
            # The tail drains the rest of the file once the server is gone.
            with contextlib.suppress(TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(self.tail_task), 3)
        if self.tail:
            await self.tail.flush()
        numbered = list(self.recent)
        texts = [text for _, text in numbered]
        found = sglang.find_failure(texts) or (sglang.find_usage_error(texts) if exited else None)
        if found is not None:
            start = max(found.first_line - EXCERPT_CONTEXT, 0)
            excerpt = "\n".join(text for _, text in numbered[start : found.last_line + 1])
            return RunFailed(found.kind, found.message, excerpt, numbered[found.first_line][0])
        message = SERVER_EXITED if exited else "The server reported a failure."
        return RunFailed(default_kind, message, *self._excerpt_of_last(15))

    def _excerpt_of_last(self, count: int) -> tuple[str, int | None]:
        lines = list(self.recent)[-count:]
        if not lines:
            return "", None
        return "\n".join(text for _, text in lines), lines[0][0]


def _arg_mismatches(requested: dict[str, Any], effective: dict[str, Any]) -> list[str]:
    """Fields the user set that the server reports differently (SGLang may rewrite some silently)."""
    problems = []
    checks = {
        "tp_size": requested.get("tp_size"),
        "speculative_algorithm": requested.get("speculative_algorithm") or None,
        "speculative_num_steps": requested.get("speculative_num_steps"),
        "speculative_eagle_topk": requested.get("speculative_eagle_topk"),
        "speculative_num_draft_tokens": requested.get("speculative_num_draft_tokens"),
    }
    for key, want in checks.items():
        if want is None or key not in effective:
            continue
        have = effective[key]
        if key == "speculative_algorithm" and want == "NEXTN" and have == "EAGLE":
            continue  # SGLang's documented rewrite
        if have != want:
            problems.append(f"requested {key}={want!r}, the server runs {key}={have!r}")
    return problems


def _log_contains(run_id: int, text: str) -> bool:
    return LogChunk.objects.filter(run_id=run_id, text__contains=text).exists()


def _flag_value(args: list[str], flag: str) -> int | None:
    for i, arg in enumerate(args):
        value = None
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit():
            return int(value)
    return None


def _last_json_object(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            return data if isinstance(data, dict) else None
    with contextlib.suppress(json.JSONDecodeError):
        data = json.loads(text)
        return data if isinstance(data, dict) else None
    return None


def _tail(text: str, lines: int = 5) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
