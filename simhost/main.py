"""The launcher process: argument resolution, scheduler processes, then the HTTP server (see launch_server)."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import multiprocessing
import os
import random
import signal
import sys
import time
import traceback
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, NoReturn

from simhost import (
    acceptance,
    adaptive,
    draft_quality,
    drafts,
    knobs,
    logs,
    scheduler,
    speed,
    tracebacks,
    versions,
    workload,
)
from simhost import args as sargs
from simhost import faults as sfaults

FRAME = "<frame at 0x7f6c1a2b3c40, file '/usr/local/lib/python3.12/dist-packages/sglang/srt/{}', line {}, code {}>"


def _children(pid: int) -> list[int]:
    """All descendants of pid (from /proc), deepest last."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_process_tree() -> NoReturn:
    """SGLang's kill_process_tree(os.getpid()): SIGKILL every descendant, then ourselves."""
    if versions.current().logs_kill_process_tree:
        logs.line(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}")
    for pid in _children(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(137)  # not reached


def engine_stopped(task: asyncio.Task[None]) -> None:
    """The engine's loop ends only when shutdown cancels it. Ended by an exception (a simulator bug), it would leave
    every request hanging while the HTTP side still answered /health and /metrics: die instead, as SGLang does when
    its scheduler raises, with the traceback in the log."""
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    logs.line("Scheduler hit an exception: " + "".join(traceback.format_exception(exc)).rstrip())
    kill_process_tree()


def _startup_sigquit(signum: int, frame: Any) -> None:
    logs.line("Received sigquit from a child process. It usually means the child failed.")
    kill_process_tree()


class Launcher:
    def __init__(self, argv: list[str]) -> None:
        try:
            self.ver = versions.current()
            self.faults = sfaults.active()
        except ValueError as exc:
            sys.stderr.write(f"launch_server.py: error: {exc}\n")
            raise SystemExit(2) from exc
        self.argv = list(argv)
        self.args, warnings = sargs.resolve(argv, dict(os.environ))
        a = self.args
        self.target = sargs.read_model_config(a.model_path)
        # Read once at startup, as SGLang's envs are: a value that is not a float fails here, from the main process.
        self.simulated = adaptive.SimulatedAcceptance.from_env(os.environ, self.ver.simulate_acc_default_method)
        self.draft: dict[str, Any] | None = None
        self.draft_index: dict[str, Any] | None = None
        if a.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE", "DFLASH", "DSPARK"):
            if not a.speculative_draft_model_path:
                raise ValueError(
                    f"--speculative-draft-model-path is required for speculative algorithm {a.speculative_algorithm}"
                )
            if a.speculative_draft_model_path == a.model_path:  # MTP heads or DSpark layers in the target
                self.draft, self.draft_index = drafts.in_checkpoint(
                    a.speculative_algorithm, self.target, scheduler.load_index(a.model_path)
                )
            else:
                self.draft = sargs.read_model_config(a.speculative_draft_model_path)
                self.draft_index = scheduler.load_index(a.speculative_draft_model_path)
        # Before 0.5.12 these are printed before logging is configured: bare, on stderr.
        for text in warnings:
            if self.ver.timestamped_arg_warnings:
                logs.line(text)
            else:
                logs.raw(text + "\n")
        if self.ver.server_args_dump == "repr":
            logs.line(f"server_args={a!r}")
        else:
            logs.line(f"server_args={_asdict(a)!r}")
        self.conns: list[Connection] = []
        self.procs: list[Any] = []

    # -- processes
    def spawn(self) -> None:
        a = self.args
        ctx = multiprocessing.get_context("spawn")
        dropped = {}
        if "env_drop" in self.faults:
            patterns = [p.strip() for p in knobs.get("SIMHOST_ENV_DROP").split(",") if p.strip()]
            for name in list(os.environ):
                if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                    dropped[name] = os.environ.pop(name)
        try:
            for rank in range(a.tp_size):
                parent_conn, child_conn = ctx.Pipe()
                job = scheduler.RankJob(
                    rank=rank,
                    tp_size=a.tp_size,
                    parent_pid=os.getpid(),
                    args=_asdict(a),
                    target=self.target,
                    draft=self.draft,
                    target_index=scheduler.load_index(a.model_path),
                    draft_index=self.draft_index if self.draft else None,
                    faults=self.faults,
                    fault_rank=int(knobs.get("SIMHOST_FAULT_RANK")),
                    load_seconds=knobs.get_float("SIMHOST_LOAD_SECONDS"),
                    gpu_mib=knobs.gpu_memory_mib(),
                    version=self.ver,
                )
                proc = ctx.Process(target=scheduler.run_scheduler_process, args=(job, child_conn), daemon=False)
                proc.start()
                child_conn.close()
                self.conns.append(parent_conn)
                self.procs.append(proc)
            detok = ctx.Process(target=scheduler.run_detokenizer_process, args=(os.getpid(),), daemon=False)
            detok.start()
            self.procs.append(detok)
        finally:
            os.environ.update(dropped)

    def wait_ready(self) -> dict[str, Any]:
        infos: dict[int, dict[str, Any]] = {}
        pending = dict(enumerate(self.conns))
        while pending:
            answered = wait(list(pending.values()), timeout=0.2)
            for rank, conn in list(pending.items()):
                if conn not in answered:
                    continue
                try:
                    _, info = conn.recv()
                except (EOFError, OSError):
                    self._scheduler_died(rank)
                infos[rank] = info
                del pending[rank]
        ready = dict(infos[0])
        ready["max_total_num_tokens"] = min(i["max_total_num_tokens"] for i in infos.values())
        return ready

    def _scheduler_died(self, rank: int) -> NoReturn:
        # A failing scheduler SIGQUITs us first; give that handler the chance to run.
        time.sleep(0.5)
        proc = self.procs[rank]
        proc.join(0.5)
        if self.ver.at_least("0.5.12"):
            logs.line(
                f"RuntimeError: Rank {rank} scheduler died during initialization (exit code: {proc.exitcode}). If "
                "exit code is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."
            )
        else:
            logs.line(f"Rank {rank} scheduler is dead. Please check if there are relevant logs.")
            logs.line(f"Exit code: {proc.exitcode}")
        for pid in _children(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os._exit(1)

    def stop_children(self, timeout: float = 1.0) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(("exit",))
        for proc in self.procs:
            if proc.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))

    def crash_schedulers(self, error: str | None = None) -> None:
        """Every scheduler fails: with the request-crash traceback, or with the ValueError `error` names."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(("crash",) if error is None else ("crash", error))

    # -- serving
    async def serve(self, ready: dict[str, Any]) -> int:
        from aiohttp import ClientSession, ClientTimeout, web

        from simhost.engine import Engine
        from simhost.server import ServerState, build_app

        a = self.args
        seed_text = os.environ.get("SIMHOST_SEED") or (str(a.random_seed) if a.random_seed is not None else "")
        seed = int(seed_text) if seed_text else random.SystemRandom().randrange(2**32)
        engine_knobs = {
            "speed": knobs.get_float("SIMHOST_SPEED"),
            "fast_burst_steps": knobs.get_float("SIMHOST_FAST_BURST_STEPS"),
            "noise": knobs.get_float("SIMHOST_NOISE"),
            "launch_noise": knobs.get_float("SIMHOST_LAUNCH_NOISE"),
            "slowdown": knobs.get_float("SIMHOST_SLOWDOWN"),
            "drift": knobs.get_float("SIMHOST_DRIFT"),
            # A trained draft's quality (simhost/draft_quality.py): its config's multiplier on acceptance, and a draft
            # whose weights the serving loader skips accepts nothing.
            "accept_p": knobs.get_float("SIMHOST_ACCEPT_P") * draft_quality.acceptance_multiplier(self.draft),
            "accept_spread": knobs.get_float("SIMHOST_ACCEPT_SPREAD"),
            "ngram_accept_p": knobs.get_float("SIMHOST_NGRAM_ACCEPT_P"),
            "accepts_nothing": float(
                acceptance.accepts_nothing(a.speculative_algorithm, self.draft)
                or (self.draft is not None and draft_quality.weights_skipped(a.speculative_draft_model_path))
            ),
            # STANDALONE with a draft of another vocabulary, where the version does not refuse it: outputs corrupted
            "vocab_mismatch": float(drafts.vocab_mismatch(a.speculative_algorithm, self.target, self.draft)),
            "vocab_size": float(self.target.get("vocab_size", 32000)),
            "throttle_after": knobs.get_float("SIMHOST_THROTTLE_AFTER_S")
            if knobs.get("SIMHOST_THROTTLE_AFTER_S")
            else -1,
            "throttle_factor": knobs.get_float("SIMHOST_THROTTLE_FACTOR"),
            "profile": float(os.environ.get("EAGLE3_PROFILE", "").lower() in ("1", "true")),
            "profile_every": float(os.environ.get("EAGLE3_PROFILE_EVERY") or 1),
        }
        engine = Engine(
            a,
            ready,
            speed.SpeedParams(),
            engine_knobs,
            seed,
            self.ver,
            acceptance_seed=int(seed_text or 0),
            simulated=self.simulated,
        )
        engine.on_fatal = self.crash_schedulers
        engine.workload = workload.WorkloadFaults.for_server(self.faults, bool(engine.cfg.algorithm))
        state = ServerState(
            args=a,
            engine=engine,
            ready=ready,
            target=self.target,
            faults=self.faults,
            flaky_seconds=knobs.get_float("SIMHOST_FLAKY_SECONDS"),
            health_poll=knobs.get_float("SIMHOST_HEALTH_POLL_SECONDS"),
            crash=self.crash_schedulers if {"crash_on_first_request", "crash_mid_benchmark"} & self.faults else None,
            crash_after=(
                0 if "crash_on_first_request" in self.faults else int(knobs.get_float("SIMHOST_CRASH_AFTER_REQUESTS"))
            ),
            version=self.ver,
            argv=self.argv,
            draft_bug_after=int(knobs.get_float("SIMHOST_DRAFT_BUG_AFTER")),
            nondeterminism=knobs.get_float("SIMHOST_NONDETERMINISM"),
        )
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def on_sigterm(signum: int) -> None:
            if signum == signal.SIGTERM:
                frame = FRAME.format("entrypoints/http_server.py", 1583, "launch_server")
                logs.line(f"SIGTERM received. signum={signum} frame={frame}. Draining requests and shutting down...")
            state.status = "shutdown"
            stop.set()

        def on_sigquit() -> None:
            logs.line(
                f"SIGQUIT received. signum={int(signal.SIGQUIT)}, "
                f"frame={FRAME.format('managers/tokenizer_manager.py', 2105, 'handle_loop')}. "
                "It usually means one child failed."
            )
            kill_process_tree()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm, signal.SIGTERM)
        loop.add_signal_handler(signal.SIGINT, on_sigterm, signal.SIGINT)
        loop.add_signal_handler(signal.SIGQUIT, on_sigquit)
        engine_task = asyncio.create_task(engine.run())
        engine_task.add_done_callback(engine_stopped)

        runner = web.AppRunner(build_app(state), access_log=None, handle_signals=False)
        await runner.setup()
        logs.uvicorn(f"Started server process [{os.getpid()}]")
        logs.uvicorn("Waiting for application startup.")
        logs.uvicorn("Application startup complete.")
        site = web.TCPSite(runner, a.host, a.port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            logs.line(
                f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                f"('{a.host}', {a.port}): {os.strerror(exc.errno or 98).lower()}"
            )
            self.stop_children()
            return 1
        logs.uvicorn(f"Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")

        async def warmup() -> None:
            base = f"http://{'127.0.0.1' if a.host in ('0.0.0.0', '') else a.host}:{a.port}"
            if "warmup_exception" in self.faults:
                logs.raw("ERROR:    Exception in ASGI application\n" + tracebacks.asgi_exception_traceback() + "\n")
            if not a.skip_server_warmup:
                async with ClientSession(timeout=ClientTimeout(total=600)) as http:
                    for _ in range(120):
                        try:
                            info = "/model_info" if self.ver.new_info_endpoints else "/get_model_info"
                            async with http.get(f"{base}{info}") as r:
                                if r.status == 200:
                                    break
                        except OSError:
                            pass
                        await asyncio.sleep(1)
                    body = {
                        "text": "The capital city of France is",
                        "sampling_params": {"temperature": 0, "max_new_tokens": 8},
                    }
                    async with http.post(f"{base}/generate", json=body, headers={"X-Simhost-Warmup": "1"}) as r:
                        await r.read()
            state.status = "up" if state.status == "starting" else state.status
            state.up_since = time.monotonic()
            logs.line("The server is fired up and ready to roll!")
            if "log_flood" in self.faults and self.conns:
                # rank 0 floods (its own process: the HTTP server keeps its pace)
                with contextlib.suppress(OSError):
                    self.conns[0].send(("flood", knobs.get_float("SIMHOST_FLOOD_LINES_PER_S")))

        warm = asyncio.create_task(warmup())
        await stop.wait()
        await engine.wait_idle()  # drain running requests, as SGLang does on SIGTERM
        warm.cancel()
        logs.uvicorn("Shutting down")
        await site.stop()
        logs.uvicorn("Waiting for application shutdown.")
        logs.uvicorn("Application shutdown complete.")
        engine_task.cancel()
        await runner.cleanup()
        logs.uvicorn(f"Finished server process [{os.getpid()}]")
        self.stop_children()
        return 0


def _asdict(a: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(a)


def main(argv: list[str]) -> int:
    launcher = Launcher(argv)
    signal.signal(signal.SIGQUIT, _startup_sigquit)
    launcher.spawn()
    ready = launcher.wait_ready()
    code = asyncio.run(launcher.serve(ready))
    # Not sys.exit: multiprocessing's atexit hook would join a scheduler that refuses to stop.
    os._exit(code)
