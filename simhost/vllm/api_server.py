"""The API server process (`vllm serve`'s own process): flags and configs, the bound-but-not-listening socket, the
EngineCore process, then the HTTP server, the periodic stats lines, signals, and the engine-death watchdog
(reference §2.1, §2.4, §3.1, §4.6, §4.7)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import random
import signal
import socket
import sys
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from simhost import acceptance, draft_quality, drafts, gpu, knobs, speed, workload
from simhost import faults as sfaults
from simhost.vllm import args as vargs
from simhost.vllm import core, lines, tracebacks, versions
from simhost.vllm.logs import STDERR, ProcLog

# The watchdog's period (VLLM_WATCHDOG_TIME_S = 5.0 in vLLM's launcher): a dead engine ends the server this long
# after its death.
WATCHDOG_S = 5.0


def _die(text: str, code: int) -> NoReturn:
    os.write(STDERR, text.encode())
    os._exit(code)


class ApiServer:
    def __init__(self, argv: list[str]) -> None:
        try:
            self.ver = versions.current()
            self.faults = sfaults.active()
        except ValueError as exc:
            _die(f"vllm: error: {exc}\n", 2)
        ver = self.ver
        self.log = ProcLog(ver, "APIServer")
        try:
            self.a = vargs.parse(argv, ver)
        except vargs.UsageError as exc:
            _die(exc.text, 2)
        except vargs.ConfigError as exc:
            self.log.printed(tracebacks.traceback(tracebacks.api_server_frames()[:1], exc.text) + "\n")
            os._exit(1)
        a = self.a
        if ver.server_version_line:
            self.log.info("api_server.py:1839", f"vLLM server version {ver.text}, serving model {a.model}")
        else:
            self.log.info("api_server.py:1839", f"vLLM API server version {ver.text}")
        self.log.info("utils.py:233", f"non-default args: {a.non_default}")
        for where, text in a.warnings:
            self.log.warning(where, text)
        gpu_mib = knobs.gpu_memory_mib()
        try:
            allow_long = os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").lower() in ("1", "true")
            self.setup = vargs.resolve(a, ver, gpu_mib, allow_long)
            visible = len(gpu.visible_gpus())
            if a.tp > visible:
                raise vargs.ConfigError(tracebacks.tp_too_large(ver, a.tp, visible))
        except vargs.ConfigError as exc:
            self.log.printed(tracebacks.config_traceback(exc.text) + "\n")
            os._exit(1)
        s = self.setup
        derived = vargs.derived_max_model_len(s.target)
        if s.max_model_len > derived:
            # the reference names the variable, not vLLM's warning text: this wording is the simulator's
            self.log.warning(
                "model.py:1520",
                f"User-specified max_model_len ({s.max_model_len}) is greater than the derived max_model_len "
                f"({derived}). VLLM_ALLOW_LONG_MAX_MODEL_LEN is set: using {s.max_model_len}.",
            )
        self.log.info("model.py:547", f"Resolved architecture: {s.architecture}")
        self.log.info("model.py:1510", f"Using max model len {s.max_model_len}")
        if s.spec is not None and s.spec.draft_config is not None:
            draft_arch = (s.spec.draft_config.get("architectures") or ["LlamaForCausalLMEagle3"])[0]
            draft_len = min(
                s.spec.draft_max_model_len or s.max_model_len, vargs.derived_max_model_len(s.spec.draft_config)
            )
            self.log.info("model.py:547", f"Resolved architecture: {draft_arch}")
            self.log.info("model.py:1510", f"Using max model len {draft_len}")
            draft_positions = vargs.derived_max_model_len(s.spec.draft_config)
            if ver.at_least("0.28.0") and draft_positions < s.max_model_len:
                # 0.28+ raises a plain-RoPE draft's positions to the target's (§4.3); before, the draft silently
                # runs with the shorter length (and crashes on longer prompts, which the simulator does not imitate)
                self.log.info(
                    "vllm.py:3040",
                    f"Overriding draft model max_position_embeddings from {draft_positions} to the target model's "
                    f"max_model_len ({s.max_model_len}); the draft shares the target's positional space.",
                )
        self.log.info(
            "scheduler.py:205", f"Chunked prefill is enabled with max_num_batched_tokens={s.max_num_batched_tokens}."
        )
        if a.enforce_eager:
            if ver.at_least("0.31.0"):
                self.log.warning(
                    "vllm.py:700",
                    "Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to setting "
                    "-cc.mode=none -cc.cudagraph_mode=none",
                )
            else:
                self.log.info("vllm.py:700", "Cudagraph is disabled under eager mode")
        self.proc: Any = None
        self.conn: Connection | None = None

    # -- socket and engine
    def bind(self) -> socket.socket:
        """Bind before the engine starts, without listen(): connections are refused until uvicorn serves (§2.1)."""
        a = self.a
        host = a.host or "0.0.0.0"
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.ver.reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, a.port))
        except OSError:
            self.log.printed(tracebacks.port_in_use(host, a.port) + "\n")
            os._exit(1)
        return sock

    def start_engine(self) -> None:
        s = self.setup
        # `vllm serve` sets the spawn method unless already set; children inherit it (§5).
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        draft = s.spec.model if s.spec is not None and s.spec.draft_config is not None else None
        job = core.CoreJob(
            ver=self.ver,
            setup=s,
            api_pid=os.getpid(),
            load_seconds=knobs.get_float("SIMHOST_LOAD_SECONDS"),
            gpu_mib=knobs.gpu_memory_mib(),
            faults=self.faults,
            target_bytes=vargs.weights_bytes(s.args.model, 16 << 30),
            draft_bytes=_draft_bytes(s, draft),
            target_shards=vargs.shard_count(s.args.model),
            draft_shards=vargs.shard_count(draft) if draft else 1,
            title_prefix=os.environ.get("VLLM_PROCESS_NAME_PREFIX", "VLLM"),
        )
        ctx = multiprocessing.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=core.run_engine_core, args=(job, child_conn), name=self.ver.engine_core_name)
        self.proc.start()
        child_conn.close()
        self.conn = parent_conn

    def wait_engine(self) -> dict[str, Any]:
        assert self.conn is not None
        last_note = time.monotonic()
        while True:
            ready = wait([self.conn, self.proc.sentinel], timeout=1.0)
            if not ready and time.monotonic() - last_note >= 10.0:  # STARTUP_POLL_PERIOD_MS (§2.5), DEBUG only
                last_note = time.monotonic()
                self.log.record("DEBUG", "utils.py:845", "Waiting for 1 local, 0 remote core engine proc(s) to start.")
            if self.conn in ready:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):
                    message = ("gone",)
                if message[0] == "ready":
                    info: dict[str, Any] = message[1]
                    return info
            if ready:
                self.proc.join(2.0)
                code = self.proc.exitcode if self.proc.exitcode is not None else 1
                self.log.printed(tracebacks.engine_init_failed(self.ver, code) + "\n")
                os._exit(1)

    # -- serving
    async def serve(self, sock: socket.socket, info: dict[str, Any]) -> int:
        from aiohttp import web

        from simhost.vllm.engine import VllmEngine
        from simhost.vllm.server import ROUTES, State, build_app

        a, s, ver = self.a, self.setup, self.ver
        seed_text = os.environ.get("SIMHOST_SEED") or (str(a.seed) if a.seed is not None else "")
        seed = int(seed_text) if seed_text else random.SystemRandom().randrange(2**32)
        draft = s.spec.draft_config if s.spec else None
        method = s.spec.method if s.spec else None
        engine_knobs = {
            "speed": knobs.get_float("SIMHOST_SPEED"),
            "fast_burst_steps": knobs.get_float("SIMHOST_FAST_BURST_STEPS"),
            "noise": knobs.get_float("SIMHOST_NOISE"),
            "launch_noise": knobs.get_float("SIMHOST_LAUNCH_NOISE"),
            "slowdown": knobs.get_float("SIMHOST_SLOWDOWN"),
            "drift": knobs.get_float("SIMHOST_DRIFT"),
            # A trained draft's quality (simhost/draft_quality.py), as simhost's SGLang serves it.
            "accept_p": knobs.get_float("SIMHOST_ACCEPT_P") * draft_quality.acceptance_multiplier(draft),
            "accept_spread": knobs.get_float("SIMHOST_ACCEPT_SPREAD"),
            "ngram_accept_p": knobs.get_float("SIMHOST_NGRAM_ACCEPT_P"),
            # An EAGLE3 head served as method "eagle": simhost's SGLang accepts nothing there; vLLM is assumed to
            # behave alike (the reference is silent).
            # A draft whose weights the loader skips: assumed silent in vLLM too (the reference is silent).
            "accepts_nothing": float(
                acceptance.accepts_nothing("EAGLE" if method == "eagle" else None, draft)
                or (draft is not None and s.spec is not None and draft_quality.weights_skipped(s.spec.model))
            ),
            "vocab_size": float(s.target.get("vocab_size", 32000)),
            "throttle_after": knobs.get_float("SIMHOST_THROTTLE_AFTER_S")
            if knobs.get("SIMHOST_THROTTLE_AFTER_S")
            else -1,
            "throttle_factor": knobs.get_float("SIMHOST_THROTTLE_FACTOR"),
        }
        ready = {"max_total_num_tokens": info["kv_tokens"], "max_running_requests": s.max_num_seqs}
        engine = VllmEngine(
            s, ready, speed.SpeedParams(), engine_knobs, seed, None, acceptance_seed=int(seed_text or 0)
        )
        engine.workload = workload.WorkloadFaults.for_server(self.faults, bool(engine.cfg.algorithm))
        crash_faults = {"crash_on_first_request", "crash_mid_benchmark"} & self.faults
        state = State(
            ver=ver,
            setup=s,
            engine=engine,
            log=self.log,
            faults=self.faults,
            crash=self.crash_engine if crash_faults else None,
            crash_after=0
            if "crash_on_first_request" in self.faults
            else int(knobs.get_float("SIMHOST_CRASH_AFTER_REQUESTS")),
            draft_bug_after=int(knobs.get_float("SIMHOST_DRAFT_BUG_AFTER")),
            nondeterminism=knobs.get_float("SIMHOST_NONDETERMINISM"),
        )
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        self.stopping = False
        engine_task = asyncio.create_task(engine.run())

        def on_signal() -> None:
            for text in ver.shutdown_lines:
                self.log.info("launcher.py:99", text)
            stop.set()

        loop.add_signal_handler(signal.SIGTERM, on_signal)
        loop.add_signal_handler(signal.SIGINT, on_signal)

        def engine_gone(reported: bool) -> None:
            if self.stopping:
                return
            if reported:
                self.log.error("async_llm.py:480", f"AsyncLLM output_handler failed.\n{tracebacks.engine_dead()}")
            else:
                self.log.error(
                    "core_client.py:564",
                    f"Engine core proc {ver.engine_core_name} died unexpectedly, shutting down client.",
                )
            engine_task.cancel()
            state.engine_died()
            if os.environ.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") not in ("1", "true", "True"):
                loop.call_later(WATCHDOG_S, stop.set)

        threading.Thread(target=self.watch_engine, args=(loop, engine_gone), daemon=True).start()

        dev_mode = os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
        if dev_mode:
            self.log.warning(
                "api_server.py:1723",
                "SECURITY WARNING: Development endpoints are enabled! This should NOT be used in production!",
            )
        runner = web.AppRunner(build_app(state, dev_mode), access_log=None, handle_signals=False)
        await runner.setup()
        if ver.supported_tasks_line:
            self.log.info("api_server.py:1611", ver.supported_tasks_line % ["generate"])
        url = f"http://{a.host or '0.0.0.0'}:{a.port}"
        self.log.info("api_server.py:1912", ver.serving_line.format(i=0, url=url))
        self.log.info("launcher.py:34", "Available routes are:")
        for path, methods in ROUTES:
            self.log.info("launcher.py:42", f"Route: {path}, Methods: {methods}")
        self.log.uvicorn(f"Started server process [{os.getpid()}]")
        self.log.uvicorn("Waiting for application startup.")
        self.log.uvicorn("Application startup complete.")
        site = web.SockSite(runner, sock)
        await site.start()  # listen(): the first connection is accepted from here on
        stats = None if a.disable_log_stats else asyncio.create_task(self.log_stats(engine))

        await stop.wait()
        self.stopping = True
        self.log.uvicorn("Shutting down")
        if not state.dead:
            with contextlib.suppress(asyncio.TimeoutError):  # uvicorn waits for open connections to finish
                await asyncio.wait_for(engine.wait_idle(), 30)
        await site.stop()
        self.log.uvicorn("Waiting for application shutdown.")
        self.log.uvicorn("Application shutdown complete.")
        if stats is not None:
            stats.cancel()
        engine_task.cancel()
        await runner.cleanup()
        self.stop_engine()
        self.log.uvicorn(f"Finished server process [{os.getpid()}]")
        return 0

    def crash_engine(self) -> None:
        assert self.conn is not None
        with contextlib.suppress(OSError):
            self.conn.send(("crash",))

    def watch_engine(self, loop: asyncio.AbstractEventLoop, gone: Any) -> None:
        """EngineCore's end, told (`dead`: a fatal error) or not (the process vanished)."""
        assert self.conn is not None
        reported = False
        while True:
            ready = wait([self.conn, self.proc.sentinel])
            if self.conn in ready:
                try:
                    message = self.conn.recv()
                    reported = reported or message[0] == "dead"
                    continue
                except (EOFError, OSError):
                    pass
            self.proc.join(1.0)
            loop.call_soon_threadsafe(gone, reported)
            return

    def stop_engine(self) -> None:
        """Engine processes get an exit request (SIGTERM in vLLM), a 5 s grace, then SIGKILL (§4.7)."""
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.send(("exit",))
        if self.proc is not None:
            self.proc.join(5.0)
            if self.proc.is_alive():
                self.proc.kill()

    async def log_stats(self, engine: Any) -> None:
        """Every VLLM_LOG_STATS_INTERVAL seconds: the stats line (DEBUG, so hidden, after two idle intervals) and
        the SpecDecoding line when the interval had drafts (§3.1)."""
        interval = float(os.environ.get("VLLM_LOG_STATS_INTERVAL") or 10.0)
        st = engine.stats
        last = time.monotonic()
        last_spec = last
        last_prompt, last_gen = st.prompt_tokens, st.generation_tokens
        busy = [False, False]
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            elapsed = max(now - last, 1e-9)
            prompt_tps = (st.prompt_tokens - last_prompt) / elapsed
            gen_tps = (st.generation_tokens - last_gen) / elapsed
            last, last_prompt, last_gen = now, st.prompt_tokens, st.generation_tokens
            busy = [busy[1], prompt_tps > 0 or gen_tps > 0]
            level = "INFO" if any(busy) else "DEBUG"
            _, usage = engine.token_usage()
            hit = st.cached_tokens / st.prompt_tokens if st.prompt_tokens else 0.0
            text = lines.stats_line(
                self.ver,
                prompt_tps,
                gen_tps,
                len(engine.running),
                len(engine.waiting),
                usage,
                hit,
                st.prompt_tokens > 0,
            )
            self.log.record(level, "loggers.py:127", text)
            if engine.cfg.algorithm and engine.window.num_drafts:
                w = engine.take_window()
                spec = lines.spec_line(
                    self.ver, w.num_drafts, w.num_draft_tokens, w.num_accepted, w.per_position, now - last_spec
                )
                last_spec = now
                self.log.record(level, "metrics.py:96", spec)


HELP_KNOBS = """
simulator (simhost) environment:
  SIMHOST_VLLM_VERSION (default {default}): the vLLM whose formats are imitated; supported: {supported}
  SIMHOST_LOAD_SECONDS, SIMHOST_SPEED, SIMHOST_GPUS, SIMHOST_GPU_MEMORY_MIB, SIMHOST_STATE_DIR, SIMHOST_FAULTS ...:
    as for `python -m simhost.launch_server --help`
vLLM environment honoured: VLLM_LOG_STATS_INTERVAL, VLLM_KEEP_ALIVE_ON_ENGINE_DEATH, VLLM_LOGGING_STREAM,
  VLLM_LOGGING_PREFIX, VLLM_LOGGING_LEVEL, VLLM_LOGGING_COLOR, NO_COLOR, VLLM_PROCESS_NAME_PREFIX,
  VLLM_SERVER_DEV_MODE, VLLM_WORKER_MULTIPROC_METHOD
"""


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        # vLLM's own help is pages long; the simulator prints the usage line and its knobs (a simplification)
        text = vargs.SERVE_USAGE + HELP_KNOBS.format(default=versions.DEFAULT, supported=", ".join(versions.SUPPORTED))
        os.write(1, text.encode())
        return 0
    server = ApiServer(argv)
    sock = server.bind()
    server.start_engine()
    info = server.wait_engine()
    code = asyncio.run(server.serve(sock, info))
    sys.stdout.flush()
    # Not sys.exit: multiprocessing's atexit hook would join an EngineCore that outlives us.
    os._exit(code)


def _draft_bytes(setup: vargs.EngineSetup, draft: str | None) -> int:
    """The drafter's weights: its checkpoint's, or for mtp the target's share of its MTP layer(s)."""
    if not draft or setup.spec is None:
        return 0
    if setup.spec.method == "mtp":
        index = {"metadata": {"total_size": vargs.weights_bytes(draft, 16 << 30)}}
        return int(drafts.in_checkpoint("EAGLE", setup.target, index)[1]["metadata"]["total_size"])
    return vargs.weights_bytes(draft, 1 << 30)
