"""SGLang's torch-profiler endpoints on the simulated host: `/start_profile` and `/stop_profile` with SGLang's body
fields and replies (../shared/reference/speculative-observability.md, d2), the engine's steps recorded while
profiling, and per-rank gzipped Chrome-trace JSON files as torch.profiler exports them, named as SGLang names them.

The traces are small but real in shape: per engine step, SGLang's step spans (`step[TARGET_VERIFY bs=4]`, as its
`build_step_span_name` names each model-runner forward) on the CPU (`user_annotation`) and on the GPU
(`gpu_user_annotation`), and inside each span kernels named like the real ones (cuBLAS/nvjet GEMMs, flashinfer
attention, fused MoE, NCCL all-reduce). Their durations are the speed model's (`speed.phase_parts`) times the step's
noise factor, so a summary of the trace can be checked against the model's own numbers.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from simhost import logs, speed, tracebacks

# The simulator keeps every recorded step in memory until it writes the traces: a profile without num_steps stops
# by itself after this many steps (a real server would record on; its traces grow to hundreds of MB).
MAX_PROFILE_STEPS = 1000
ACTIVITIES = ("CPU", "GPU", "MEM", "RPD", "CUDA_PROFILER")
STREAM = 7  # the compute stream kineto reports for SGLang's forwards

# ProfileReqInput's fields (0.5.23 io_struct.py) and the type pydantic holds each to; all optional.
FIELDS: dict[str, str] = {
    "output_dir": "str",
    "start_step": "int",
    "num_steps": "int",
    "activities": "list[str]",
    "profile_by_stage": "bool",
    "with_stack": "bool",
    "record_shapes": "bool",
    "profile_id": "str",
    "merge_profiles": "bool",
    "profile_prefix": "str",
    "profile_stages": "list[str]",
    "detailed_annotations": "bool",
}

# Kernels inside each span: (name, share of the span's time). Shares add up to under 1: the GPU idles a little
# between launches even under CUDA graphs.
_GEMM = "nvjet_tst_192x128_64x4_2x1_v_bz_coopB_TNT"
_DRAFT_GEMM = "nvjet_tst_64x8_64x16_4x1_v_bz_TNN"
_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
_MOE = "fused_moe_kernel"
_NORM = "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, ...)"
_DECODE_ATTN = "void flashinfer::BatchDecodeWithPagedKVCacheKernel<flashinfer::PosEncodingMode::kNone, 2u, 4u, ...>"
_PREFILL_ATTN = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<...>, ...>"
_TOPK = "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<...>, ...)"
KERNELS: dict[str, list[tuple[str, float]]] = {
    "TARGET_VERIFY": [
        (_GEMM, 0.30),
        (_MOE, 0.18),
        (_PREFILL_ATTN, 0.16),
        (_ALLREDUCE, 0.22),
        (_NORM, 0.04),
        ("verify_tree_greedy", 0.03),
    ],
    "DECODE": [(_GEMM, 0.33), (_MOE, 0.2), (_DECODE_ATTN, 0.14), (_ALLREDUCE, 0.22), (_NORM, 0.04)],
    "DRAFT_DECODE": [(_DRAFT_GEMM, 0.45), (_DECODE_ATTN, 0.25), (_ALLREDUCE, 0.1), (_TOPK, 0.08), (_NORM, 0.05)],
    "DRAFT_EXTEND": [
        (_DRAFT_GEMM, 0.4),
        (_PREFILL_ATTN, 0.25),
        (_ALLREDUCE, 0.1),
        ("create_extend_after_decode_spec_info", 0.05),
        (_TOPK, 0.1),
    ],
    "EXTEND": [(_GEMM, 0.38), (_MOE, 0.2), (_PREFILL_ATTN, 0.15), (_ALLREDUCE, 0.2), (_NORM, 0.02)],
}


class ProfileBodyError(Exception):
    """A body FastAPI would refuse before SGLang sees it: 422 with pydantic's error list."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = errors


def _error(kind: str, loc: list[Any], msg: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "loc": ["body", *loc], "msg": msg, "input": value}


def _coerce(name: str, kind: str, value: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Pydantic's lax mode as far as these types go: ints from integral numbers and digit strings, bools from
    true/false words and 0/1, strings as given, lists of strings."""
    if value is None:
        return None, []
    if kind == "int":
        if isinstance(value, bool):
            return int(value), []
        if isinstance(value, int):
            return value, []
        if isinstance(value, float):
            if value.is_integer():
                return int(value), []
            msg = "Input should be a valid integer, got a number with a fractional part"
            return None, [_error("int_from_float", [name], msg, value)]
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value), []
        if isinstance(value, str):
            msg = "Input should be a valid integer, unable to parse string as an integer"
            return None, [_error("int_parsing", [name], msg, value)]
        return None, [_error("int_type", [name], "Input should be a valid integer", value)]
    if kind == "bool":
        words = {w: True for w in ("true", "1", "yes", "on")} | {w: False for w in ("false", "0", "no", "off")}
        if isinstance(value, bool):
            return value, []
        if isinstance(value, int) and value in (0, 1):
            return bool(value), []
        if isinstance(value, str) and value.lower() in words:
            return words[value.lower()], []
        msg = "Input should be a valid boolean, unable to interpret input"
        return None, [_error("bool_parsing", [name], msg, value)]
    if kind == "str":
        if isinstance(value, str):
            return value, []
        return None, [_error("string_type", [name], "Input should be a valid string", value)]
    if not isinstance(value, list):
        return None, [_error("list_type", [name], "Input should be a valid list", value)]
    errors = [
        _error("string_type", [name, i], "Input should be a valid string", item)
        for i, item in enumerate(value)
        if not isinstance(item, str)
    ]
    return (None if errors else list(value)), errors


def parse_body(body: Any) -> dict[str, Any]:
    """The request's ProfileReqInput (unknown keys ignored, as pydantic does); raises ProfileBodyError."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        msg = "Input should be a valid dictionary or object to extract fields from"
        raise ProfileBodyError([{"type": "model_attributes_type", "loc": ["body"], "msg": msg, "input": body}])
    out: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    for name, kind in FIELDS.items():
        value, problems = _coerce(name, kind, body.get(name))
        out[name] = value
        errors += problems
    if errors:
        raise ProfileBodyError(errors)
    return out


@dataclass
class _Step:
    kind: str  # "decode" | "prefill"
    bs: int
    factor: float
    new_tokens: int = 0


@dataclass
class Session:
    output_dir: str
    profile_id: str
    prefix: str
    start_step: int
    num_steps: int | None
    activities: tuple[str, ...]
    by_stage: bool
    merge: bool
    started_at: float = field(default_factory=time.time)
    steps: list[_Step] = field(default_factory=list)
    recording: bool = False


class Profiler:
    """The engine's profiler: started and stopped over HTTP, told of every engine step by the engine."""

    def __init__(self, cfg: speed.SpecConfig, params: speed.SpeedParams, tp_size: int) -> None:
        self.cfg = cfg
        self.params = params
        self.tp_size = max(1, tp_size)
        self.session: Session | None = None
        self.forward_ct = 0
        # profile_by_stage with speculation: SGLang's export blocks the scheduler (sglang #34942); set once it has.
        self.frozen = False
        self._writing: asyncio.Task[None] | None = None

    # ---- HTTP side -----------------------------------------------------------------------------------------

    def start(self, req: dict[str, Any]) -> str | None:
        """Start a profile; None, or SGLang's reason for refusing."""
        if self.session is not None:
            return "Profiling is already in progress. Call /stop_profile first."
        output_dir = req["output_dir"] or os.environ.get("SGLANG_TORCH_PROFILER_DIR") or "/tmp"
        activities = tuple(a for a in (req["activities"] or ["CPU", "GPU"]) if a in ACTIVITIES)
        self.session = Session(
            output_dir=output_dir,
            profile_id=req["profile_id"] or str(time.time()),
            prefix=req["profile_prefix"] or "",
            start_step=req["start_step"] if req["start_step"] is not None else -1,
            num_steps=req["num_steps"],
            activities=activities,
            by_stage=bool(req["profile_by_stage"]),
            merge=bool(req["merge_profiles"]),
        )
        for rank in range(self.tp_size):
            logs.line(
                f"Profiling starts. Traces will be saved to: {output_dir} (with profile id: {self.session.profile_id})",
                rank,
                self.tp_size,
            )
        self.session.recording = self.session.start_step <= self.forward_ct
        return None

    def stop(self) -> str | None:
        if self.session is None or self._writing is not None:
            return "Profiling is not in progress. Call /start_profile first."
        self._finish()
        return None

    # ---- engine side -----------------------------------------------------------------------------------------

    def on_step(self, kind: str, bs: int, factor: float, new_tokens: int = 0) -> None:
        """One engine step has run (a prefill batch or a decode iteration), with its noise factor."""
        self.forward_ct += 1
        session = self.session
        if session is None or self._writing is not None:
            return
        if not session.recording:
            session.recording = self.forward_ct >= session.start_step
            return
        session.steps.append(_Step(kind, bs, factor, new_tokens))
        limit = MAX_PROFILE_STEPS if session.num_steps is None else min(session.num_steps, MAX_PROFILE_STEPS)
        if len(session.steps) >= limit:
            if session.by_stage and self.cfg.algorithm:
                self.frozen = True  # the export never returns; neither does the scheduler
                return
            self._finish()

    def _finish(self) -> None:
        session = self.session
        assert session is not None
        self._writing = asyncio.get_running_loop().create_task(self._write(session))

    async def _write(self, session: Session) -> None:
        try:
            await asyncio.to_thread(write_traces, session, self.cfg, self.params, self.tp_size)
            for rank in range(self.tp_size):
                logs.line(f"Profiling done. Traces are saved to: {session.output_dir}", rank, self.tp_size)
        except OSError as exc:
            logs.line(f"Failed to save the profile: {exc}", 0, self.tp_size)
        finally:
            self.session = None
            self._writing = None

    async def wait_frozen(self) -> None:
        """What the engine does once frozen: nothing, for ever (until the process is killed)."""
        await asyncio.Event().wait()


# ---- the trace files (pure but for the writing) ------------------------------------------------------------


def trace_file_names(session: Session, tp_size: int) -> dict[int, list[str]]:
    """Per rank, the file names SGLang gives its traces (with profile_by_stage, one per stage)."""
    head = f"{session.prefix}-" if session.prefix else ""
    stages = _stages(session) if session.by_stage else [""]
    return {
        rank: [f"{head}{session.profile_id}-TP-{rank}{f'-{s}' if s else ''}.trace.json.gz" for s in stages]
        for rank in range(tp_size)
    }


def _stages(session: Session) -> list[str]:
    kinds = {s.kind for s in session.steps}
    return [name for kind, name in (("prefill", "EXTEND"), ("decode", "DECODE")) if kind in kinds] or ["DECODE"]


def write_traces(session: Session, cfg: speed.SpecConfig, params: speed.SpeedParams, tp_size: int) -> list[Path]:
    directory = Path(session.output_dir)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    merged: list[dict[str, Any]] = []
    for rank, names in trace_file_names(session, tp_size).items():
        for name in names:
            stage = name.removesuffix(".trace.json.gz").rsplit("-", 1)[-1] if session.by_stage else ""
            steps = [s for s in session.steps if not stage or (s.kind == "prefill") == (stage == "EXTEND")]
            trace = build_trace(steps, cfg, params, rank, tp_size, session)
            merged += trace["traceEvents"]
            path = directory / name
            path.write_bytes(gzip.compress(json.dumps(trace).encode(), compresslevel=6))
            written.append(path)
    if session.merge:
        path = directory / f"merged-{session.profile_id}.trace.json.gz"
        path.write_bytes(gzip.compress(json.dumps({"traceEvents": merged}).encode(), compresslevel=6))
        written.append(path)
    return written


def build_trace(
    steps: list[_Step],
    cfg: speed.SpecConfig,
    params: speed.SpeedParams,
    rank: int,
    tp_size: int,
    session: Session,
) -> dict[str, Any]:
    """One rank's Chrome trace of the recorded steps (what torch.profiler's export_chrome_trace writes)."""
    cpu_pid, gpu_pid = os.getpid(), rank
    cpu, gpu = "CPU" in session.activities, "GPU" in session.activities
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": cpu_pid, "tid": 0, "args": {"name": f"sglang::scheduler_TP{rank}"}},
        {"ph": "M", "name": "process_name", "pid": gpu_pid, "tid": 0, "args": {"name": f"GPU {rank}"}},
        {"ph": "M", "name": "thread_name", "pid": gpu_pid, "tid": STREAM, "args": {"name": f"stream {STREAM}"}},
    ]
    t = session.started_at * 1e6  # microseconds, as kineto writes them
    correlation = 1
    for step in steps:
        spans: list[tuple[str, str, float]] = []  # (span name, kernel set, ms)
        if step.kind == "prefill":
            ms = speed.prefill_ms(params, cfg, step.new_tokens) * step.factor
            spans.append((f"step[EXTEND bs={step.bs} toks={step.new_tokens}]", "EXTEND", ms))
            other = 0.0
        else:
            parts = speed.phase_parts(params, cfg, step.bs)
            if cfg.algorithm:
                each = parts.draft * step.factor / max(cfg.num_steps, 1)
                spans += [(f"step[DECODE bs={step.bs}]", "DRAFT_DECODE", each)] * max(cfg.num_steps, 1)
                spans.append((f"step[TARGET_VERIFY bs={step.bs}]", "TARGET_VERIFY", parts.verify * step.factor))
                spans.append((f"step[DRAFT_EXTEND bs={step.bs}]", "DRAFT_EXTEND", parts.draft_extend * step.factor))
            else:
                spans.append((f"step[DECODE bs={step.bs}]", "DECODE", parts.verify * step.factor))
            other = parts.other * step.factor
        for name, kernel_set, ms in spans:
            dur = ms * 1000
            if cpu:
                events.append(_x("user_annotation", name, cpu_pid, rank, t - 30, min(dur, 120.0)))
                launch = _x("cuda_runtime", "cudaGraphLaunch", cpu_pid, rank, t - 25, 8.0)
                launch["args"] = {"correlation": correlation}
                events.append(launch)
            if gpu:
                events.append(_x("gpu_user_annotation", name, gpu_pid, STREAM, t, dur))
                k = t
                jump = 0.0
                if kernel_set == "TARGET_VERIFY":  # the fitted jump above 3 tokens is the attention kernel's
                    jump = min(speed.attention_jump_ms(params, cfg.num_draft_tokens) * step.factor * 1000, dur)
                rest = dur - jump
                gap = rest * (1 - sum(share for _, share in KERNELS[kernel_set])) / len(KERNELS[kernel_set])
                for kernel, share in KERNELS[kernel_set]:
                    length = rest * share + (jump if kernel == _PREFILL_ATTN else 0.0)
                    event = _x("kernel", kernel, gpu_pid, STREAM, k, length)
                    event["args"] = {"device": rank, "stream": STREAM, "correlation": correlation}
                    events.append(event)
                    k += length + gap
            correlation += 1
            t += dur
        if other > 0 and gpu:
            # The scheduler's own work between iterations: the GPU waits, bar the copy of the accepted tokens.
            copy = _x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", gpu_pid, STREAM, t, min(5.0, other * 100))
            copy["args"] = {"device": rank, "stream": STREAM, "bytes": 64 * step.bs}
            events.append(copy)
        t += other * 1000
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": rank, "name": "NVIDIA H200", "totalGlobalMem": 150754820096}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": tp_size},
        "traceEvents": events,
        "traceName": f"{session.profile_id}-TP-{rank}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": int(session.started_at * 1e9),
    }


def _x(cat: str, name: str, pid: int, tid: int, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3), "dur": round(dur, 3)}


# ---- HTTP handlers -----------------------------------------------------------------------------------------


def _asgi_error(message: str) -> web.Response:
    """SGLang's tokenizer manager raises RuntimeError(message) for a refused profile: uvicorn logs the traceback and
    FastAPI answers a bare 500."""
    logs.raw("ERROR:    Exception in ASGI application\n" + tracebacks.profile_error_traceback(message) + "\n")
    return web.Response(status=500, text="Internal Server Error")


async def start_profile(request: web.Request, profiler: Profiler) -> web.Response:
    body: Any = None
    if request.body_exists:
        raw = await request.read()
        if raw.strip():
            try:
                body = json.loads(raw)
            except ValueError as exc:
                error = {"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error", "input": {}}
                error["ctx"] = {"error": str(exc).split(":")[0]}
                return web.json_response({"detail": [error]}, status=422)
    try:
        req = parse_body(body)
    except ProfileBodyError as exc:
        return web.json_response({"detail": exc.errors}, status=422)
    refusal = profiler.start(req)
    if refusal:
        return _asgi_error(refusal)
    return web.Response(text="Start profiling.\n")


async def stop_profile(request: web.Request, profiler: Profiler) -> web.Response:
    refusal = profiler.stop()
    if refusal:
        return _asgi_error(refusal)
    return web.Response(text="Stop profiling. This will take some time.\n")
