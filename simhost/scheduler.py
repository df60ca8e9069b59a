"""One scheduler process per TP rank (spawned by the launcher): prints the per-rank startup lines, "holds"
GPU memory in the registry, reports ready over its pipe, then waits for commands (crash, exit).

Kept free of aiohttp and asyncio so spawning eight of them stays cheap.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simhost import acceptance, drafts, gpu, lines, logs, speed, tracebacks, versions
from simhost import args as sargs

GIB = 1 << 30


@dataclass
class RankJob:
    """Everything a scheduler process needs (pickled to the spawned process)."""

    rank: int
    tp_size: int
    parent_pid: int
    args: dict[str, Any]
    target: dict[str, Any]
    draft: dict[str, Any] | None
    target_index: dict[str, Any]
    draft_index: dict[str, Any] | None
    faults: frozenset[str]
    fault_rank: int
    load_seconds: float
    gpu_mib: int
    env_override: dict[str, str] = field(default_factory=dict)
    version: versions.Version = field(default_factory=versions.current)


class SchedulerError(Exception):
    """Carries the traceback text SGLang would print for a scheduler failure."""


# ----------------------------------------------------------------------------------------------- the process


class _Rank:
    def __init__(self, job: RankJob, conn: Any) -> None:
        self.job = job
        self.conn = conn
        self.a = job.args
        self.name = f"sglang::scheduler_TP{job.rank}" if job.tp_size > 1 else "sglang::scheduler"
        self.total_gb = job.gpu_mib / 1024
        self.held_gb = 0.0
        self.gpu_index = -1
        self.leak = "leak" in job.faults and job.rank == job.fault_rank
        self.stubborn = "ignore_sigterm" in job.faults and job.rank == job.fault_rank
        self.ver = job.version
        self.graphs = not sargs.cuda_graph_disabled(self.a)
        self.phases = self._phase_seconds()

    # -- output helpers
    def log(self, message: str) -> None:
        logs.line(message, self.job.rank, self.job.tp_size)

    def log0(self, message: str) -> None:
        if self.job.rank == 0:
            self.log(message)

    def hold(self, gb: float) -> None:
        self.held_gb = gb
        if self.gpu_index >= 0:
            gpu.register({self.gpu_index: int(gb * 1024)}, self.name, leak=self.leak)

    def fail(self, traceback_text: str) -> None:
        """SGLang's run_scheduler_process except-branch: log, SIGQUIT the parent, end."""
        self.log(f"Scheduler hit an exception: {traceback_text}")
        try:
            os.kill(self.job.parent_pid, signal.SIGQUIT)
        except ProcessLookupError:
            pass
        self.exit(1)

    def exit(self, code: int = 0) -> None:
        if not self.leak:
            gpu.unregister()
        os._exit(code)

    # -- timing
    def _phase_seconds(self) -> dict[str, float]:
        spec = self.job.draft is not None
        weights = {"init": 0.04, "weights": 0.5, "kv": 0.03, "capture": 0.2}
        if spec:
            weights |= {"draft_weights": 0.06, "draft_capture": 0.12, "draft_extend": 0.05}
        if not self.graphs:
            weights.update(capture=0.0, draft_capture=0.0, draft_extend=0.0)
        total = sum(weights.values())
        return {k: self.job.load_seconds * v / total for k, v in weights.items()}

    def sleep(self, phase: str, fraction: float = 1.0) -> None:
        time.sleep(self.phases.get(phase, 0.0) * fraction)

    # -- startup
    def _shards(self, index: dict[str, Any] | None, phase: str) -> None:
        files = sorted(set((index or {}).get("weight_map", {}).values())) or ["model.safetensors"]
        n = len(files)
        start = time.monotonic()
        if self.job.rank == 0:
            logs.raw(f"Loading safetensors checkpoint shards:   0% Completed | 0/{n} [00:00<?, ?it/s]\n")
        for i in range(1, n + 1):
            self.sleep(phase, 1 / n)
            if self.job.rank == 0:
                el = time.monotonic() - start
                rate = i / el if el > 0 else 99.99
                left = (n - i) / rate if rate else 0
                logs.raw(
                    f"Loading safetensors checkpoint shards: {100 * i // n:3d}% Completed | {i}/{n} "
                    f"[{_mmss(el)}<{_mmss(left)}, {rate:6.2f}it/s]\n"
                )

    def run(self) -> None:
        job, a = self.job, self.a
        visible = gpu.visible_gpus()
        ordinal = a["base_gpu_id"] + job.rank * a["gpu_id_step"]
        if self.ver.init_line != "none":
            self.log("Init torch distributed begin.")
        start = time.monotonic()
        self.sleep("init")
        if ordinal >= len(visible):
            self.fail(tracebacks.device_traceback())
        self.gpu_index = visible[ordinal]
        others = gpu.used_mib(exclude_pid=os.getpid()).get(self.gpu_index, 0) / 1024
        init_use = 1.96 if job.tp_size > 1 else 0.0
        self.hold(0.55 + init_use)
        self._init_ends(time.monotonic() - start, init_use)

        avail = self.total_gb - others - self.held_gb
        mfs = float(a["mem_fraction_static"])
        weights = min(
            job.target_index.get("metadata", {}).get("total_size", 16 * GIB) / job.tp_size / GIB,
            0.55 * self.total_gb * mfs,
        )
        self.log(f"Load weight begin. avail mem={avail:.2f} GB")
        start = time.monotonic()
        self._shards(job.target_index, "weights")
        avail -= weights
        self.hold(self.held_gb + weights)
        arch = (job.target.get("architectures") or ["LlamaForCausalLM"])[0]
        self._weight_end(time.monotonic() - start, arch, avail, weights)
        if "zombie" in job.faults:
            while True:  # stuck (an NCCL hang, say): no more output, memory stays held
                time.sleep(3600)

        rest = avail - self.total_gb * (1 - mfs)
        if rest <= 0:
            self.fail(tracebacks.memory_traceback(mfs))
        draft_weights = 0.0
        if job.draft is not None:
            draft_weights = (job.draft_index or {}).get("metadata", {}).get("total_size", GIB) / job.tp_size / GIB
        per_token_t = _kv_bytes_per_token(job.target, job.tp_size)
        per_token_d = _kv_bytes_per_token(job.draft, job.tp_size) if job.draft else 0
        kv_budget = max(rest - draft_weights - 1.5, 0.5) * GIB
        tokens = int(kv_budget / (per_token_t + per_token_d))
        if a["max_total_tokens"]:
            tokens = min(tokens, int(a["max_total_tokens"]))
        kv_dtype = "torch.bfloat16" if a["kv_cache_dtype"] == "auto" else f"torch.{a['kv_cache_dtype']}"
        self.log(f"Using KV cache dtype: {kv_dtype}")
        self.sleep("kv")
        target_kv = tokens * per_token_t / GIB
        self.log(_kv_line(job.target, tokens, target_kv, kv_dtype if self.ver.kv_line_dtype else None))
        avail -= target_kv
        self.hold(self.held_gb + target_kv)
        self.log(f"Memory pool end. avail mem={avail:.2f} GB")

        context_len = a["context_length"] or job.target.get("max_position_embeddings", 4096)
        max_running = a["max_running_requests"] or min(max(int(tokens / context_len * 512), 2048), 4096)
        graph_bs = _graph_batch_sizes(a, max_running)
        if self.graphs:
            if self.ver.capture_style == "classic":
                avail = self._capture("Capture cuda graph", avail, 0.5, "capture", graph_bs)
            else:
                spec = job.draft is not None
                what = "target verify" if spec else "target decode"
                per_req = int(a["speculative_num_draft_tokens"]) if spec else 1
                avail = self._capture_c(what, avail, 0.5, "capture", graph_bs, per_req, target=True)

        if job.draft is not None:
            avail = self._draft(context_len, tokens, avail, draft_weights, graph_bs)

        self.log0(
            f"max_total_num_tokens={tokens}, chunked_prefill_size={a['chunked_prefill_size']}, "
            f"max_prefill_tokens={a['max_prefill_tokens']}, max_running_requests={max_running}, "
            f"context_len={context_len}, available_gpu_mem={avail:.2f} GB"
        )
        self.conn.send(
            (
                "ready",
                {
                    "rank": job.rank,
                    "pid": os.getpid(),
                    "gpu": self.gpu_index,
                    "max_total_num_tokens": tokens,
                    "context_len": context_len,
                    "max_running_requests": max_running,
                    "available_gpu_mem": round(avail, 2),
                    "weight": round(weights + draft_weights, 2),
                    "kvcache": round(target_kv, 2),
                    "graph": 0.5 if self.graphs else 0.0,
                    "cuda_graph_bs": graph_bs,
                },
            )
        )
        self.serve()

    def _capture(self, what: str, avail: float, usage: float, phase: str, graph_bs: list[int] | None) -> float:
        avail -= 0.5 if graph_bs else 0.0
        self.log(f"{what} begin. This can take up to several minutes. avail mem={avail:.2f} GB")
        start = time.monotonic()
        if graph_bs:
            self.log0(f"Capture cuda graph bs {graph_bs}")
            self._maybe_oom(phase)
            n = len(graph_bs)
        self.sleep(phase)
        elapsed = time.monotonic() - start
        if graph_bs and self.job.rank == 0:
            # tqdm's \r-updated bar, in one write so other ranks' lines cannot land inside it
            logs.raw(
                f"\rCapturing batches (bs={graph_bs[-1]} avail_mem={avail:.2f} GB):   0%|          "
                f"| 0/{n} [00:00<?, ?it/s]"
                f"\rCapturing batches (bs=1 avail_mem={avail - usage:.2f} GB): 100%|██████████| {n}/{n} "
                f"[{_mmss(elapsed)}<00:00, {n / max(elapsed, 1e-3):5.2f}it/s]\n"
            )
        avail -= usage
        self.hold(self.held_gb + usage)
        self.log(f"{what} end. Time elapsed: {elapsed:.2f} s. mem usage={usage:.2f} GB. avail mem={avail:.2f} GB.")
        return avail

    def _draft(self, context_len: int, tokens: int, avail: float, weights: float, graph_bs: list[int]) -> float:
        job, a = self.job, self.a
        assert job.draft is not None
        derived = job.draft.get("max_position_embeddings", 2048)
        if context_len > derived:
            if os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "").lower() not in ("1", "true"):
                self.fail(tracebacks.context_error_traceback(context_len, derived))
            self.log(tracebacks.context_message(True, context_len, derived))
            self.log(f"Overriding the draft model's max_position_embeddings to {context_len}.")
        if self.ver.init_line != "none":
            self.log("Init torch distributed begin.")
        self._init_ends(0.0, 0.0)
        self.log(f"Load weight begin. avail mem={avail:.2f} GB")
        start = time.monotonic()
        self._shards(job.draft_index, "draft_weights")
        arch = (job.draft.get("architectures") or ["LlamaForCausalLMEagle3"])[0]
        if str(arch).endswith("NextN") and int(job.draft.get("num_hidden_layers", 0)) != 1:
            self.fail(tracebacks.nextn_traceback())  # NEXTN on a target without its MTP layer
        avail -= weights
        self.hold(self.held_gb + weights)
        self._weight_end(time.monotonic() - start, arch, avail, weights)
        if drafts.vocab_mismatch(a["speculative_algorithm"], job.target, job.draft) and self.ver.at_least("0.5.23"):
            self.fail(tracebacks.standalone_vocab_traceback(job.target["vocab_size"], job.draft["vocab_size"]))
        kv = tokens * _kv_bytes_per_token(job.draft, job.tp_size) / GIB
        kv_dtype = "torch.bfloat16" if a["kv_cache_dtype"] == "auto" else f"torch.{a['kv_cache_dtype']}"
        self.log(_kv_line(job.draft, tokens, kv, kv_dtype if self.ver.kv_line_dtype else None))
        avail -= kv
        self.hold(self.held_gb + kv)
        self.log(f"Memory pool end. avail mem={avail:.2f} GB")
        if self.graphs and self.ver.capture_style == "classic":
            if (a["speculative_num_steps"] or 0) > 1:
                avail = self._capture("Capture draft cuda graph", avail, 0.4, "draft_capture", None)
            avail = self._capture("Capture draft extend cuda graph", avail, 0.1, "draft_extend", None)
        elif self.graphs:
            topk = int(a["speculative_eagle_topk"] or 1)
            if (a["speculative_num_steps"] or 0) > 1:
                avail = self._capture_c("draft decode", avail, 0.4, "draft_capture", graph_bs, topk)
            draft_tokens = int(a["speculative_num_draft_tokens"] or 1)
            avail = self._capture_c("draft extend", avail, 0.1, "draft_extend", graph_bs, draft_tokens)
        return avail

    # -- per-version line shapes (reference §3.2 table)
    def _init_ends(self, elapsed: float, usage: float) -> None:
        if self.ver.init_line == "elapsed":
            self.log(f"Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage={usage:.2f} GB")
        elif self.ver.init_line == "plain":
            self.log(f"Init torch distributed ends. mem usage={usage:.2f} GB")

    def _weight_end(self, elapsed: float, arch: str, avail: float, usage: float) -> None:
        parts = [f"elapsed={elapsed:.2f} s"] if self.ver.weight_end_elapsed else []
        parts.append(f"type={arch}")
        if self.ver.weight_end_dtype:
            parts.append("dtype=torch.bfloat16")
        parts += [f"avail mem={avail:.2f} GB", f"mem usage={usage:.2f} GB."]
        self.log("Load weight end. " + ", ".join(parts))

    def _maybe_oom(self, phase: str) -> None:
        cfg = speed.SpecConfig.from_server_args(argparse.Namespace(**self.a))
        if "oom_capture" in self.job.faults or not cfg.fits_graph_memory:
            self.sleep(phase, 0.5)
            self.fail(tracebacks.oom_traceback(self.gpu_index, self.ver))

    def _capture_c(
        self, what: str, avail: float, usage: float, phase: str, bs: list[int], per_req: int, target: bool = False
    ) -> float:
        """Era C capture lines: `Capture target verify CUDA graph begin. backend=full, ...`."""
        avail -= 0.5 if target else 0.0
        style = self.ver.capture_style
        key = "num_tokens_per_bs" if style == "c14" else "num_tokens_per_req"
        bs_part = "" if (style == "c22" and target) else f", bs={bs}"
        self.log0(f"Capture {what} CUDA graph begin. backend=full, {key}={per_req}{bs_part}, avail mem={avail:.2f} GB")
        start = time.monotonic()
        if target:
            self._maybe_oom(phase)
        self.sleep(phase)
        avail -= usage
        self.hold(self.held_gb + usage)
        end_bs = f"bs={bs}, " if (style == "c22" and target) else ""
        self.log0(
            f"Capture {what} CUDA graph end. {end_bs}elapsed={time.monotonic() - start:.2f} s, "
            f"mem usage={usage:.2f} GB, avail mem={avail:.2f} GB."
        )
        return avail

    # -- serving
    def serve(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                message = ("parent_gone",)
            if message[0] == "crash":
                if len(message) > 1:  # the engine's own error (a misconfigured simulation)
                    self.fail(tracebacks.simulated_acceptance_traceback(str(message[1])))
                self.fail(tracebacks.request_crash_traceback(bool(self.a["speculative_algorithm"])))
            if message[0] == "flood":
                threading.Thread(target=self.flood, args=(float(message[1]),), daemon=True).start()
                continue
            if self.stubborn:
                while True:  # outlives the server, memory held, until SIGKILL
                    time.sleep(3600)
            self.exit(0)

    def flood(self, rate: float) -> None:
        """log_flood: `rate` extra lines per second, Decode/Prefill-shaped (one Prefill per 40), numbered like
        SGLANG_LOG_FORWARD_ITERS does (`Decode batch [N], ...`), written in large blocks of whole lines."""
        if rate <= 0:
            return
        a = self.a
        spec = None
        if a["speculative_algorithm"]:
            cap = min(int(a["speculative_num_steps"] or 0), int(a["speculative_num_draft_tokens"] or 1) - 1)
            p = 0.0 if acceptance.accepts_nothing(a["speculative_algorithm"], self.job.draft) else 0.62
            length = speed.expected_accept_length(p, cap)
            steps, drafts = int(a["speculative_num_steps"] or 0), int(a["speculative_num_draft_tokens"] or 1)
            spec = (length, self.ver.accept_rate(round(length * 1000), 1000, steps, drafts))
        marker = 999_999_937  # a counter value no real line carries; replaced per line
        decode = lines.decode(self.ver, 1, 1024, 0.0, spec, self.graphs, 80.0, 0, iters=marker)
        prefill = lines.prefill(self.ver, 1, 128, 0, 0.0, 0, 0, 2000.0, iters=marker)
        d_head, d_tail = decode.split(str(marker))
        p_head, p_tail = prefill.split(str(marker))
        n = 0
        start = time.monotonic()
        while True:
            due = int((time.monotonic() - start) * rate) - n
            if due <= 0:
                time.sleep(0.005)
                continue
            due = min(due, 20000)  # <= ~5 MB per write
            prefix = logs.stamp(self.job.rank, self.job.tp_size) + " "
            chunk = [
                f"{prefix}{p_head}{i}{p_tail}\n" if i % 40 == 0 else f"{prefix}{d_head}{i}{d_tail}\n"
                for i in range(n + 1, n + due + 1)
            ]
            logs.raw("".join(chunk))
            n += due

    def watch_parent(self) -> None:
        while True:
            time.sleep(0.2)
            if os.getppid() != self.job.parent_pid and not self.stubborn:
                self.exit(0)


def _mmss(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def _kv_bytes_per_token(config: dict[str, Any] | None, tp: int) -> int:
    if not config:
        return 0
    layers = int(config.get("num_hidden_layers", 32))
    if "kv_lora_rank" in config:  # MLA: one latent vector per token and layer, replicated on every rank
        return layers * (int(config["kv_lora_rank"]) + int(config.get("qk_rope_head_dim", 64))) * 2
    heads = int(config.get("num_key_value_heads") or config.get("num_attention_heads", 8))
    head_dim = int(config.get("head_dim") or config.get("hidden_size", 4096) // config.get("num_attention_heads", 32))
    return layers * 2 * max(1, heads // tp) * head_dim * 2


def _kv_line(config: dict[str, Any], tokens: int, size_gb: float, dtype: str | None = None) -> str:
    head = f"KV Cache is allocated. {f'dtype: {dtype}, ' if dtype else ''}#tokens: {tokens}"
    if "kv_lora_rank" in config:
        return f"{head}, KV size: {size_gb:.2f} GB"
    return f"{head}, K size: {size_gb / 2:.2f} GB, V size: {size_gb / 2:.2f} GB"


def _graph_batch_sizes(a: dict[str, Any], max_running: int) -> list[int]:
    explicit = sargs.cuda_graph_bs(a)
    if explicit:
        sizes = sorted(explicit)
    elif a["speculative_algorithm"]:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, 513, 16)]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 513, 16)]
    cap = min(sargs.cuda_graph_max_bs(a) or 512, max_running)
    return [s for s in sizes if s <= cap] or [1]


def _set_title(title: str) -> None:
    # Without SPT_NOENV, setproctitle reuses the environ memory for the title and /proc/<pid>/environ reads
    # as zeros; keep it intact so environment checks against the scheduler processes work.
    os.environ.setdefault("SPT_NOENV", "1")
    from setproctitle import setproctitle

    setproctitle(title)


def run_scheduler_process(job: RankJob, conn: Any) -> None:
    """Entry point of a spawned scheduler process."""

    rank = _Rank(job, conn)
    _set_title(rank.name)
    if rank.stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: rank.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the launcher, which stops us
    threading.Thread(target=rank.watch_parent, daemon=True).start()
    try:
        rank.run()
    except Exception as exc:  # a simulator bug: still die like a scheduler would
        rank.fail(f"Traceback (most recent call last):\n  (simhost internal)\n{type(exc).__name__}: {exc}")


def run_detokenizer_process(parent_pid: int) -> None:
    _set_title("sglang::detokenizer")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.getppid() == parent_pid:
        time.sleep(0.2)
    sys.exit(0)


def load_index(model_dir: str) -> dict[str, Any]:
    path = Path(model_dir) / "model.safetensors.index.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data
