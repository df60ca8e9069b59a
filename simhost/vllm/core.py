"""The EngineCore process (`VLLM::EngineCore`) and, for TP > 1, its TP worker processes (`VLLM::Worker_TP{r}`):
startup lines, GPU memory in simhost's registry, startup failures, and what happens when a process dies.

The engine's steps themselves run in the API server (simhost/vllm/engine.py), as simhost's SGLang runs them in its
launcher; these processes are what a real host shows: titles, environment, memory, log lines, and the lifetimes of
reference §4.7: EngineCore has no parent-death detection (SIGKILL of the API server leaves it and its workers
alive, holding memory), workers end when EngineCore does (`Parent process exited, terminating worker`).
Kept free of aiohttp and asyncio so spawning them stays cheap. Over 400 lines because a rank's startup (memory,
lines, failures) is one story told once for EngineCore (TP=1) and the workers (TP>1).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from simhost import gpu
from simhost.vllm import lines, logs, tracebacks
from simhost.vllm.args import EngineSetup
from simhost.vllm.versions import VllmVersion

GIB = 1 << 30
# The simulator's memory figures (GiB per rank; guesses of the right size for a large MoE on an H200).
CUDA_CONTEXT_GIB = 0.55
NCCL_GIB = 0.35  # TP > 1: communicator buffers
ACTIVATION_PEAK_GIB = 2.5  # the profile run's peak, freed again, outside the KV cache
GRAPH_POOL_GIB = 1.5  # CUDA graphs of every capture size (outside --gpu-memory-utilization before 0.21)
SAMPLER_WARMUP_GIB = 0.25  # transient memory the sampler warm-up needs outside the budget
# vLLM 0.11's default capture sizes: 1, 2, 4, then every 8 up to 512 (67 sizes); FULL decode graphs up to the
# max_num_seqs the graphs are sized for (the simulator's guess: 35 sizes).
PIECEWISE_SIZES, FULL_SIZES = 67, 35
_KV_CHECK_FRAME = ("vllm/v1/core/kv_cache_utils.py", 699, "check_enough_kv_cache_memory", "raise ValueError(")


@dataclass
class CoreJob:
    """Everything EngineCore and its workers need (pickled to the spawned processes)."""

    ver: VllmVersion
    setup: EngineSetup
    api_pid: int
    load_seconds: float
    gpu_mib: int
    faults: frozenset[str]
    target_bytes: int
    draft_bytes: int
    target_shards: int
    draft_shards: int
    title_prefix: str


class StartupFailure(Exception):
    """A rank failed to start: `text` is the traceback it logs."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def set_title(title: str) -> None:
    # SPT_NOENV keeps /proc/<pid>/environ readable after setproctitle (simhost/scheduler.py does the same).
    os.environ.setdefault("SPT_NOENV", "1")
    from setproctitle import setproctitle

    setproctitle(title)


def _kv_bytes_per_token(config: dict[str, Any] | None, tp: int) -> int:
    if not config:
        return 0
    layers = int(config.get("num_hidden_layers", 32))
    if "kv_lora_rank" in config:  # MLA: one latent vector per token and layer, replicated on every rank
        return layers * (int(config["kv_lora_rank"]) + int(config.get("qk_rope_head_dim", 64))) * 2
    heads = int(config.get("num_key_value_heads") or config.get("num_attention_heads", 8))
    head_dim = int(config.get("head_dim") or config.get("hidden_size", 4096) // config.get("num_attention_heads", 32))
    return layers * 2 * max(1, heads // tp) * head_dim * 2


class Rank:
    """One rank's startup (TP=1: inside EngineCore; TP>1: one worker process each)."""

    def __init__(self, job: CoreJob, rank: int, log: logs.ProcLog, name: str) -> None:
        self.job, self.rank, self.log, self.name = job, rank, log, name
        self.setup = job.setup
        self.ver = job.ver
        self.tp = job.setup.args.tp
        self.total = job.gpu_mib / 1024
        self.held = 0.0
        self.gpu_index = -1
        self.others = 0.0
        self.eager = job.setup.args.enforce_eager
        self.compile_s = 0.0
        self.leak = "leak" in job.faults and rank == 0
        weights = {"init": 0.05, "weights": 0.45, "draft": 0.05, "compile": 0.15, "kv": 0.05, "capture": 0.25}
        if self.eager:
            weights.update(compile=0.0, capture=0.0)
        total = sum(weights.values())
        self.phases = {k: job.load_seconds * v / total for k, v in weights.items()}

    # -- helpers
    def sleep(self, phase: str, fraction: float = 1.0) -> None:
        time.sleep(self.phases.get(phase, 0.0) * fraction)

    def info(self, where: str, message: str, everywhere: bool = False) -> None:
        """A per-rank line: every rank prints it up to 0.11, rank 0 only from 0.13 (info_once, scope local)."""
        if self.rank == 0 or everywhere or self.ver.per_rank_lines_everywhere:
            self.log.info(where, message)

    def hold(self, gib: float) -> None:
        self.held = gib
        if self.gpu_index >= 0:
            gpu.register({self.gpu_index: int(gib * 1024)}, self.name, leak=self.leak)

    def oom(self, tried_gib: float, where: str, frames_above: list[tuple[str, int, str, str]]) -> NoReturn:
        free_mib = (self.total - self.others - self.held) * 1024
        final, frames = tracebacks.out_of_memory(self.rank, self.total, free_mib, self.held, tried_gib * 1024, where)
        if where == "sampler":
            final = f"{final}\n\nThe above exception was the direct cause of the following exception:\n\n" + (
                tracebacks.traceback(frames, tracebacks.sampler_oom(self.setup.max_num_seqs))
            )
        raise StartupFailure(tracebacks.traceback(frames_above + frames, final))

    def frames(self) -> list[tuple[str, int, str, str]]:
        """Where a rank's failure is raised from: EngineCore's init (TP=1) or a worker's main (TP>1)."""
        if self.tp == 1:
            return tracebacks.engine_core_frames()[:2]
        return [
            ("vllm/v1/executor/multiproc_executor.py", 571, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
            ("vllm/v1/executor/multiproc_executor.py", 437, "__init__", "self.worker.load_model()"),
        ]

    # -- phases
    def load(self) -> float:
        """Device init, weights, compile and the profile run; returns the KV cache memory this rank can give."""
        s, a = self.setup, self.setup.args
        visible = gpu.visible_gpus()
        frames = self.frames()
        if self.tp > len(visible):
            raise StartupFailure(tracebacks.traceback(frames, tracebacks.tp_too_large(self.ver, self.tp, len(visible))))
        self.gpu_index = visible[self.rank]
        self.others = gpu.used_mib(exclude_pid=os.getpid()).get(self.gpu_index, 0) / 1024
        self.log.info(
            "parallel_state.py:1208",
            f"rank {self.rank} in world size {self.tp} is assigned as DP rank 0, PP rank 0, TP rank {self.rank}, "
            "EP rank " + str(self.rank),
        )
        self.sleep("init")
        self.hold(CUDA_CONTEXT_GIB + (NCCL_GIB if self.tp > 1 else 0.0))
        free = self.total - self.others
        util = a.gpu_memory_utilization
        if self.ver.at_least("0.9.2") and free < util * self.total:
            raise StartupFailure(
                tracebacks.traceback(
                    [*frames, ("vllm/v1/worker/gpu_worker.py", 184, "init_device", "raise ValueError(")],
                    tracebacks.free_memory(self.ver, self.gpu_index, free, self.total, util),
                )
            )
        self.info("gpu_model_runner.py:2602", f"Starting to load model {a.model}...")
        mla = "kv_lora_rank" in s.target
        self.info("cuda.py:366", f"Using {'FlashMLA' if mla else 'Flash Attention'} backend on V1 engine.")
        load_frames = [*frames, ("vllm/v1/worker/gpu_worker.py", 214, "load_model", "self.model_runner.load_model(")]
        start = load_start = time.monotonic()
        self._weights(self.job.target_bytes / self.tp / GIB, self.job.target_shards, "weights", load_frames)
        self.info("default_loader.py:267", f"Loading weights took {time.monotonic() - start:.2f} seconds")
        if s.spec is not None and s.spec.draft_config is not None:
            self.info("gpu_model_runner.py:2641", "Loading drafter model...")
            start = time.monotonic()
            self._weights(self.job.draft_bytes / self.tp / GIB, self.job.draft_shards, "draft", load_frames)
            self.info("default_loader.py:267", f"Loading weights took {time.monotonic() - start:.2f} seconds")
            self.info("eagle.py:850", "Assuming the EAGLE head shares the same vocab embedding with the target model.")
            if s.spec.method == "eagle3":
                self.info("eagle.py:872", "The EAGLE head's lm_head will be loaded separately from the target model.")
        weights_gib = self.held - CUDA_CONTEXT_GIB - (NCCL_GIB if self.tp > 1 else 0.0)
        self.info(
            "gpu_model_runner.py:2653",
            self.ver.model_loading_line(weights_gib, time.monotonic() - load_start),
        )
        if not self.eager:
            self._compile()
        self.sleep("kv")
        budget = util * self.total
        graphs_inside = self.ver.graph_memory_profiling and not self.eager
        kv = budget - self.held - ACTIVATION_PEAK_GIB - (GRAPH_POOL_GIB if graphs_inside else 0.0)
        if graphs_inside:
            self.info(
                "gpu_worker.py:300",
                "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                f"--gpu-memory-utilization={util:.4f} is equivalent to --gpu-memory-utilization="
                f"{util - GRAPH_POOL_GIB / self.total:.4f} without CUDA graph memory profiling.",
            )
        if kv > 0:
            self.info("gpu_worker.py:298", self.ver.available_kv_line(kv))
        return kv

    def _weights(self, gib: float, shards: int, phase: str, frames: list[tuple[str, int, str, str]]) -> None:
        """Load `gib` in `shards` steps (rank 0 draws the tqdm bar); a shard that does not fit raises CUDA OOM."""
        per_shard = gib / shards
        start = time.monotonic()
        if self.rank == 0:
            self.log.printed(lines.tqdm_shards(0, shards, 0.0))
        for i in range(1, shards + 1):
            self.sleep(phase, 1 / shards)
            if self.held + per_shard > self.total - self.others:
                self.oom(per_shard, "load", frames)
            self.hold(self.held + per_shard)
            if self.rank == 0:
                self.log.printed(lines.tqdm_shards(i, shards, time.monotonic() - start))

    def _compile(self) -> None:
        start = time.monotonic()
        parts = ["backbone"] + (
            ["eagle_head"] if self.setup.spec is not None and self.setup.spec.method != "ngram" else []
        )
        tag = self.ver.at_least("0.31.0")
        for part in parts:
            prefix = f"[{part}] " if tag else ""
            self.info(
                "backends.py:548",
                f"{prefix}Using cache directory: /root/.cache/vllm/torch_compile_cache/3f2a9c1d7e/rank_{self.rank}_0/"
                f"{part} for vLLM's torch.compile",
            )
            if tag:
                self.info("backends.py:560", f"{prefix}Starting torch.compile")
            self.sleep("compile", 0.3 / len(parts))
            self.info(
                "backends.py:559", f"Dynamo bytecode transform time: {self.phases['compile'] * 0.3 / len(parts):.2f} s"
            )
            self.sleep("compile", 0.7 / len(parts))
            took = self.phases["compile"] * 0.7 / len(parts)
            if tag:
                self.info(
                    "backends.py:215", f"{prefix}Compiling a graph for compile range (1, 8192) takes {took:.2f} s"
                )
            else:
                self.info("backends.py:215", f"Compiling a graph for dynamic shape takes {took:.2f} s")
        self.compile_s = time.monotonic() - start
        total_line = self.ver.compile_took_line % self.compile_s
        self.info("monitor.py:34", total_line)

    def allocate(self, kv_gib: float) -> None:
        """Take the KV cache, capture the graphs, warm the sampler up (the rest of --gpu-memory-utilization)."""
        # The KV cache fills the budget (util x total) up; graphs captured inside it from 0.21 on, after it before.
        graphs_inside = self.ver.graph_memory_profiling and not self.eager
        self.hold(self.held + kv_gib + ACTIVATION_PEAK_GIB)
        frames = self.frames()
        if not self.eager:
            start = time.monotonic()
            free = self.total - self.others - self.held
            graph_need = 0.0 if self.ver.graph_memory_profiling else GRAPH_POOL_GIB
            if "oom_capture" in self.job.faults or free < graph_need:
                self.sleep("capture", 0.3)
                self.oom(max(graph_need, 0.5), "capture", frames)
            if self.rank == 0:
                if self.ver.graph_capture_desc == "shapes":
                    self.sleep("capture")
                    self.log.printed(
                        lines.tqdm_capture("Capturing CUDA graph shapes", PIECEWISE_SIZES, self.phases["capture"])
                    )
                else:
                    self.sleep("capture", 0.6)
                    desc = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)"
                    self.log.printed(lines.tqdm_capture(desc, PIECEWISE_SIZES, self.phases["capture"] * 0.6))
                    self.sleep("capture", 0.4)
                    desc = "Capturing CUDA graphs (decode, FULL)"
                    self.log.printed(lines.tqdm_capture(desc, FULL_SIZES, self.phases["capture"] * 0.4))
            else:
                self.sleep("capture")
            self.hold(self.held + (0.0 if graphs_inside else GRAPH_POOL_GIB))
            self.info(
                "gpu_model_runner.py:3480",
                f"Graph capturing finished in {time.monotonic() - start:.0f} secs, took {GRAPH_POOL_GIB:.2f} GiB",
            )
        if self.total - self.others - self.held < SAMPLER_WARMUP_GIB:
            self.oom(SAMPLER_WARMUP_GIB, "sampler", frames)


# ----------------------------------------------------------------------------------------------- EngineCore


def kv_tokens(setup: EngineSetup, kv_gib: float) -> int:
    per_token = _kv_bytes_per_token(setup.target, setup.args.tp)
    if setup.spec is not None and setup.spec.draft_config is not None:
        per_token += _kv_bytes_per_token(setup.spec.draft_config, setup.args.tp)
    return int(kv_gib * GIB / max(per_token, 1))


class EngineCore:
    def __init__(self, job: CoreJob, conn: Connection) -> None:
        self.job, self.conn, self.ver = job, conn, job.ver
        self.name = job.ver.engine_core_name
        self.log = logs.ProcLog(job.ver, self.name)
        self.workers: list[Any] = []
        self.worker_conns: list[Connection] = []
        self.rank0: Rank | None = None

    def fail_startup(self, text: str) -> NoReturn:
        """`EngineCore failed to start.` + traceback, Python's `Process EngineCore_DP0:` + traceback, exit 1."""
        self.log.error("core.py:708", f"EngineCore failed to start.\n{text}")
        self.log.printed(f"Process {self.name}:\n{text}\n")
        self.stop_workers()
        self.exit(1)

    def exit(self, code: int) -> NoReturn:
        if self.rank0 is None or not self.rank0.leak:
            gpu.unregister()
        os._exit(code)

    def stop_workers(self) -> None:
        for conn in self.worker_conns:
            try:
                conn.send(("exit",))
            except OSError:
                pass
        for proc in self.workers:
            proc.join(2.0)
            if proc.is_alive():
                proc.kill()

    def run(self) -> None:
        job, s = self.job, self.job.setup
        spec = s.spec
        self.log.info(
            "core.py:77",
            lines.engine_config_line(
                self.ver,
                model=s.args.model,
                served_model_name=s.args.served_model_name,
                max_seq_len=s.max_model_len,
                tp=s.args.tp,
                enforce_eager=s.args.enforce_eager,
                speculative=lines.speculative_config_repr(
                    spec.method if spec else None, spec.model if spec else None, spec.num_spec_tokens if spec else 0
                ),
                seed=s.args.seed,
            ),
        )
        start = time.monotonic()
        if s.args.tp == 1:
            self.rank0 = Rank(job, 0, self.log, self.title_or_name())
            try:
                kv = self.rank0.load()
            except StartupFailure as failure:
                self.fail_startup(failure.text)
        else:
            kv = self.start_workers()
        if kv <= 0:
            self.fail_startup(
                tracebacks.traceback(
                    [*tracebacks.engine_core_frames(), _KV_CHECK_FRAME],
                    tracebacks.no_cache_blocks(self.ver),
                )
            )
        tokens = kv_tokens(s, kv)
        if tokens < s.max_model_len:
            per_token_gib = kv / max(tokens, 1)
            self.fail_startup(
                tracebacks.traceback(
                    [*tracebacks.engine_core_frames(), _KV_CHECK_FRAME],
                    tracebacks.max_seq_len_too_long(
                        self.ver, s.max_model_len, per_token_gib * s.max_model_len, kv, tokens
                    ),
                )
            )
        for text in lines.kv_cache_lines(self.ver, tokens, s.max_model_len):
            self.log.info("kv_cache_utils.py:1087", text)
        if self.rank0 is not None:
            try:
                self.rank0.allocate(kv)
            except StartupFailure as failure:
                self.fail_startup(failure.text)
            compile_s = self.rank0.compile_s
        else:
            compile_s = self.allocate_workers(kv)
        took = time.monotonic() - start
        if self.ver.init_engine_style == "seconds":
            self.log.info(
                "core.py:210", f"init engine (profile, create kv cache, warmup model) took {took:.2f} seconds"
            )
        elif s.args.enforce_eager:
            self.log.info("core.py:210", f"init engine (profile, create kv cache, warmup model) took {took:.2f} s")
        else:
            self.log.info(
                "core.py:210",
                f"init engine (profile, create kv cache, warmup model) took {took:.2f} s "
                f"(compilation: {compile_s:.2f} s)",
            )
        if "zombie" in job.faults:
            while True:  # stuck after loading (an NCCL hang, say): no more output, memory held, port never listening
                time.sleep(3600)
        try:
            self.conn.send(("ready", {"kv_tokens": tokens, "pid": os.getpid()}))
        except OSError:
            pass  # the API server died while we loaded: no one notices, we serve on (an orphan, §4.7)
        self.serve()

    def title_or_name(self) -> str:
        return f"{self.job.title_prefix}::EngineCore" if self.ver.titles else "python3"

    # -- TP > 1
    def start_workers(self) -> float:
        ctx = multiprocessing.get_context("spawn")
        for rank in range(self.job.setup.args.tp):
            parent_conn, child_conn = ctx.Pipe()
            proc = ctx.Process(
                target=run_worker, args=(self.job, rank, os.getpid(), child_conn), name=self.worker_proc_name(rank)
            )
            proc.start()
            child_conn.close()
            self.workers.append(proc)
            self.worker_conns.append(parent_conn)
        results = [self.expect(rank, "profiled") for rank in range(len(self.workers))]
        return min(float(r) for r in results)

    def worker_proc_name(self, rank: int) -> str:
        return f"VllmWorker-{rank}" if not self.ver.at_least("0.11.0") else self.ver.worker_name(rank)

    def expect(self, rank: int, what: str) -> Any:
        try:
            message = self.worker_conns[rank].recv()
        except (EOFError, OSError):
            message = ("failed",)
        if message[0] != what:
            self.fail_startup(tracebacks.worker_start_failed())
        return message[1]

    def allocate_workers(self, kv: float) -> float:
        for conn in self.worker_conns:
            conn.send(("allocate", kv))
        return max(float(self.expect(rank, "ready")) for rank in range(len(self.workers)))

    # -- serving
    def serve(self) -> None:
        """Commands from the API server; a worker that dies ends the engine; the API server's death goes unnoticed
        (no parent-death detection: the orphan of reference §4.7)."""
        api_alive = True
        while True:
            watched: list[Any] = [proc.sentinel for proc in self.workers]
            if api_alive:
                watched.append(self.conn)
            ready = wait(watched, timeout=None if watched else 3600)
            for proc in self.workers:
                if proc.sentinel in ready:
                    self.log.error(
                        "multiproc_executor.py:154",
                        f"Worker proc {proc.name} died unexpectedly, shutting down executor.",
                    )
                    self.fatal(None)
            if api_alive and self.conn in ready:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):
                    api_alive = False  # nobody tells EngineCore: it lives on, memory held
                    continue
                if message[0] == "crash":
                    self.fatal(tracebacks.request_crash())
                if message[0] == "exit":
                    self.stop_workers()
                    self.exit(0)

    def fatal(self, text: str | None) -> NoReturn:
        """`EngineCore encountered a fatal error.` (§4.6): tell the API server, end the workers, exit 1."""
        if text is not None:
            self.log.error("core.py:710", f"EngineCore encountered a fatal error.\n{text}")
        try:
            self.conn.send(("dead",))
        except OSError:
            pass
        self.stop_workers()
        self.exit(1)


def run_engine_core(job: CoreJob, conn: Connection) -> None:
    """Entry point of the spawned EngineCore process."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    core = EngineCore(job, conn)
    if job.ver.titles:
        set_title(core.title_or_name())
    # EngineCore handles SIGTERM/SIGINT by raising SystemExit once (§4.7): a clean exit, memory released.
    signal.signal(signal.SIGTERM, lambda *_: core.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the API server, which stops us
    core.run()


# ----------------------------------------------------------------------------------------------- TP workers


def run_worker(job: CoreJob, rank: int, parent_pid: int, conn: Connection) -> None:
    """Entry point of a spawned TP worker."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ver = job.ver
    title = f"{job.title_prefix}::{ver.worker_name(rank)}" if ver.at_least("0.11.0") else "python3"
    if ver.at_least("0.11.0"):
        set_title(title)
    log = logs.ProcLog(ver, ver.worker_name(rank), worker=True)
    me = Rank(job, rank, log, title)

    def leave(code: int) -> NoReturn:
        if not me.leak:
            gpu.unregister()
        os._exit(code)

    signal.signal(signal.SIGTERM, lambda *_: leave(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch_parent() -> None:
        # The death pipe of reference §4.7: a worker notices its EngineCore's end.
        while True:
            time.sleep(0.2)
            if os.getppid() != parent_pid:
                log.info("multiproc_executor.py:546", "Parent process exited, terminating worker")
                leave(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    try:
        conn.send(("profiled", me.load()))
        message = conn.recv()
        if message[0] != "allocate":
            leave(0)
        me.allocate(float(message[1]))
        conn.send(("ready", me.compile_s))
    except StartupFailure as failure:
        log.error("multiproc_executor.py:597", f"WorkerProc failed to start.\n{failure.text}")
        conn.send(("failed", None))
        leave(1)
    except (EOFError, OSError):
        leave(0)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            leave(0)
        if message[0] == "exit":
            leave(0)
