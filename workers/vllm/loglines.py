"""One vLLM log line at a time: its prefixes (process, level, time, source), and the fact it carries, if any.

Every era of ../shared/reference/vllm-interface.md §2.3 and §8: era A (0.8.5-0.9.2) prefixes only TP workers,
`(VllmWorker rank=0 pid=P)`; eras B-D (0.10-0.30) prefix every printed line, `(APIServer pid=P)`,
`(EngineCore_0 pid=P)` / `(EngineCore_DP0 pid=P)` / `(EngineCore pid=P)`, `(VllmWorker TP0 pid=P)` / `(Worker_TP0
pid=P)`, ANSI-cyan in 0.10-0.13 and wherever the stream is a TTY; era E (0.31+) puts the prefix in the formatter, so
uvicorn's, tqdm's and tracebacks' lines come bare. Then vLLM's `LEVEL MM-DD HH:MM:SS [file.py:NN] message`
(no year), or uvicorn's `INFO:     message`.

The step line (`LogGrammar.step_marker`) is `SpecDecoding metrics:`, formats A and B (§3.1): the line the live
acceptance alarm reads accept lengths from, one per stats interval (10 s) with drafts. The stats line printed just
before it (`Engine 000: Avg prompt throughput: ...`) is the grammar's prefill marker: `decode_summary` leaves out a
SpecDecoding line whose interval saw one with nothing running (see `parse_step_line`).
"""

from __future__ import annotations

import functools
import math
import re

from ..engines.facts import (
    CaptureProgress,
    DecodeStats,
    FailureSignal,
    GraphCaptured,
    LogFact,
    Milestone,
    ServerArgsDump,
    ServerLimits,
    ShardProgress,
    WeightsLoaded,
)
from .engine_config import engine_config

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# `(APIServer pid=12)`, `(EngineCore_DP0 pid=12)`, `(VllmWorker rank=0 pid=12)`, `(VllmWorker TP0 pid=12)`,
# `(Worker_PP0_TP1 pid=12)`, `(Worker pid=12)`, `(MainProcess pid=12)`.
_PROCESS = re.compile(r"\((?P<process>[A-Za-z][\w]*(?: [\w=]+)*) pid=\d+\) ?")
# `INFO 10-26 12:36:26 [loggers.py:127] ` (`[v1/worker/gpu_model_runner.py:2602]` under DEBUG, a `[tag] ` may follow
# in 0.33); VLLM_LOGGING_PREFIX may stand before it.
_HEAD = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) \[[^\]]*:\d+\] ?"
)
# Uvicorn's default `%(levelprefix)s %(message)s`: the level padded to 8 and a colon.
_UVICORN = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
# Where a record starts when it follows an unterminated bar on the same physical line.
_RECORD_START = re.compile(
    r"\((?:[A-Za-z]\w*(?: [\w=]+)*) pid=\d+\) |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
)


# A cheap test for the words a record starts with, before looking for where one starts.
_MAY_EMBED = re.compile(r" pid=|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d")


def clean_line(line: str) -> str:
    """The part of a physical line worth parsing, colour codes removed.

    tqdm redraws with `\\r`, so a line may hold many states of one bar: the last is current; vLLM's NewLineFormatter
    ends each line of a multi-line record with `\\r\\n`. A record written right after an unterminated bar (another
    process, same file) starts mid-line: cut to it.
    """
    line = ANSI.sub("", line.rstrip("\r\n"))
    if "\r" in line:
        segments = [segment for segment in line.split("\r") if segment.strip()]
        line = segments[-1] if segments else ""
    if _RECORD_START.match(line) is None and _MAY_EMBED.search(line):
        embedded = _RECORD_START.search(line, 1)
        if embedded is not None:
            line = line[embedded.start() :]
    return line


@functools.lru_cache(maxsize=64)  # the warning finder and the fact finder read each line in turn
def split_prefix(line: str) -> tuple[str | None, str | None, str]:
    """`(EngineCore_DP0 pid=8) INFO 10-26 12:36:26 [core.py:77] msg` -> ("EngineCore_DP0", "10-26 12:36:26", "msg").

    The process is None where the era prints none; the timestamp None for uvicorn's, tqdm's and a traceback's own
    lines. The message keeps its leading spaces (a traceback frame's indent); uvicorn's level prefix is dropped.
    """
    line = clean_line(line)
    process = None
    match = _PROCESS.match(line)
    if match is not None:
        process, line = match.group("process"), line[match.end() :]
    head = _HEAD.search(line)
    if head is not None and head.start() <= 64:  # past VLLM_LOGGING_PREFIX at most, never inside a message
        return process, head.group("ts"), line[head.end() :]
    uvicorn = _UVICORN.match(line)
    if uvicorn is not None:
        return process, None, line[uvicorn.end() :]
    return process, None, line


def message_of(line: str) -> str:
    return split_prefix(line)[2]


# --- failures a single line proves ------------------------------------------------------------------------------

# Raised only: with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 the same words are a warning (warnings.py), and the server runs.
_CONTEXT_LENGTH = re.compile(
    r"(?:ValueError: |Value error, )(?:User-specified max_model_len \(\d+\) is greater than the derived "
    r"max_model_len|speculative_max_model_len=\d+ cannot be larger than (?:draft|target)_max_model_len=\d+)"
)
# Every line of a log is read for these, most of them access lines: literal words first, a regex only where needed.
_GPU_OOM = (
    "CUDA out of memory",
    "OutOfMemoryError",
    "CUDA error: out of memory",
    "CUDA driver error: out of memory",
    "No available memory for the cache blocks",
    "on startup is less than desired GPU memory utilization",  # `Free memory on device [cuda:N ](...) ...`
    "To serve at least one request with the model",  # `models's` up to 0.32, `model's` in 0.33
    "Error in memory profiling. Initial free memory",
)
# The kernel's OOM killer: the shell's `Killed` (alone or `line 5: 123 Killed`), the kernel's own words.
_HOST_OOM = re.compile(r"(?:^|[\]|]|: \d+ )Killed(?:\s|$)|Out of memory: Killed process")
_CRASH = (
    "Traceback (most recent call last)",
    "Engine core initialization failed",
    "EngineCore failed to start",
    "EngineCore encountered a fatal error",
    "EngineCore encountered an issue",
    "WorkerProc failed to start",
    "WorkerProc initialization failed",
    "died unexpectedly",  # `Worker proc %s ...`, `Engine core proc %s ..., shutting down client.`
    "AsyncLLM output_handler failed",
    "EngineDeadError",
    "NCCL error",
    "Timed out waiting for engine core processes",
    "terminate called after throwing an instance of",
    "device-side assert triggered",
    "an illegal memory access was encountered",
)


def failure_signal(message: str) -> FailureSignal | None:
    """The failure a line's message proves, most specific kind first (context length, GPU memory, host memory)."""
    text = message.strip()
    if "max_model_len" in text and _CONTEXT_LENGTH.search(text):
        return FailureSignal("context_length", text)
    if "emory" in text and any(words in text for words in _GPU_OOM):
        return FailureSignal("oom", text)
    if "Killed" in text and _HOST_OOM.search(text):
        return FailureSignal("host_oom", text)
    if any(words in text for words in _CRASH) or text.startswith("Fatal Python error: "):
        return FailureSignal("crashed", text)
    return None


# --- periodic lines ----------------------------------------------------------------------------------------------

SPEC_MARKER = "SpecDecoding metrics:"
STATS_MARKER = "Avg generation throughput:"
_NUMBER = r"(\d+(?:\.\d+)?|nan)"
# Format A (0.8.5-0.10.1) and B (0.10.2-0.33), reference §3.1.
_SPEC_A = re.compile(
    rf"SpecDecoding metrics: Draft acceptance rate: {_NUMBER}%, Mean acceptance length: {_NUMBER}, "
    r"Accepted: (\d+) tokens, Drafted: (\d+) tokens, Per-position acceptance rate: ([\d., na]*)"
)
_SPEC_B = re.compile(
    rf"SpecDecoding metrics: Mean acceptance length: {_NUMBER}, Accepted throughput: {_NUMBER} tokens/s, "
    rf"Drafted throughput: {_NUMBER} tokens/s, Accepted: (\d+) tokens, Drafted: (\d+) tokens, "
    rf"Per-position acceptance rate: ([\d., na]*), Avg Draft acceptance rate: {_NUMBER}%"
)
# `Engine 000: ...` (`N Engines Aggregated: ...` with DP); V0's `Running: %d reqs, Swapped: ..., Pending: %d reqs`.
_STATS = re.compile(
    r"Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: (?P<gen>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs, (?:Waiting: (?P<waiting>\d+) reqs|Swapped: \d+ reqs, Pending: (?P<pending>\d+))"
)
_KV_USAGE = re.compile(r"(?:GPU )?KV cache usage: ([\d.]+)%")
# Format A carries counts, not rates; its interval is VLLM_LOG_STATS_INTERVAL's default (§3.1): a guess where the
# environment changed it, or after an idle gap (the counts are since the last printed line).
DEFAULT_STATS_INTERVAL_S = 10.0


def _number(text: str) -> float | None:
    value = float(text)
    return None if math.isnan(value) else value


def parse_spec_line(message: str) -> DecodeStats | None:
    """A SpecDecoding line's figures as a step point.

    accept_len is vLLM's mean acceptance length (bonus token included, like SGLang's accept length); accept_rate the
    draft acceptance rate as a fraction. gen_throughput is what the drafting requests generated per second since the
    previous SpecDecoding line: a draft yields its accepted tokens plus one, and drafts number Drafted / K (K
    positions listed), so it is accepted/s + drafted/s / K (format B's own rates; format A's counts over the default
    10 s interval, an estimate). The line does not say how many requests ran, only that some drafted in its
    interval (vLLM prints none for an interval without drafts): running_req is 1, and the queue and the KV cache
    usage (the stats line's) are 0 here.
    """
    b = _SPEC_B.search(message)
    if b is not None:
        mean_len, accepted_tps, drafted_tps = _number(b[1]), _number(b[2]), _number(b[3])
        accepted, drafted, positions, rate = int(b[4]), int(b[5]), b[6], _number(b[7])
        k = _positions(positions)
        gen = (accepted_tps or 0.0) + ((drafted_tps or 0.0) / k if k else 0.0)
    else:
        a = _SPEC_A.search(message)
        if a is None:
            return None
        rate, mean_len, accepted, drafted, positions = _number(a[1]), _number(a[2]), int(a[3]), int(a[4]), a[5]
        k = _positions(positions)
        gen = (accepted + (drafted / k if k else 0)) / DEFAULT_STATS_INTERVAL_S
    return DecodeStats(
        running_req=1 if drafted else 0,
        tokens=0,
        token_usage=0.0,
        accept_len=mean_len,
        accept_rate=None if rate is None else round(rate / 100, 4),
        cuda_graph=None,
        gen_throughput=round(gen, 2),
        queue_req=0,
    )


def _positions(text: str) -> int:
    return len([p for p in text.split(",") if p.strip()])


def parse_step_line(line: str) -> tuple[str | None, DecodeStats] | None:
    """(its timestamp as printed, `MM-DD HH:MM:SS`, no year; its figures) for a SpecDecoding line, else None."""
    _, timestamp, message = split_prefix(line)
    stats = parse_spec_line(message)
    return None if stats is None else (timestamp, stats)


def stats_running(line: str) -> tuple[int, int, float | None, float] | None:
    """A stats line's (running requests, waiting requests, KV cache usage as a fraction, generation tokens/s)."""
    match = _STATS.search(message_of(line))
    if match is None:
        return None
    usage = _KV_USAGE.search(match.string)
    return (
        int(match["running"]),
        int(match["waiting"] or match["pending"]),
        None if usage is None else round(float(usage[1]) / 100, 4),
        float(match["gen"]),
    )


# --- startup lines ------------------------------------------------------------------------------------------------

# `Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.62it/s]` (also `pt checkpoint`).
_SHARDS = re.compile(r"checkpoint shards:\s*(\d{1,3})% Completed \| (\d+)/(\d+)")
# `Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|...| 67/67` (0.10+), `Capturing CUDA graph shapes`
# (0.9.2).
_CAPTURING = re.compile(r"^Capturing CUDA graph(?:s| shapes)\b.*?:\s*(\d{1,3})%\|.*?\|\s*(\d+)/(\d+)")
_GRAPH_CAPTURED = re.compile(r"^Graph capturing finished in (\d+(?:\.\d+)?) secs?")
# `GPU KV cache size: 1,234,560 tokens` and, 0.31+ on the same line, `, Maximum concurrency for 8,192 tokens per
# request: 150.70x`.
_KV_SIZE = re.compile(
    r"^(?:GPU )?KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for ([\d,]+) tokens per request)?"
)
# `Model loading took 15.4 GiB and 6.1 seconds` (<= 0.11), `... GiB memory and ...` (0.13+): target and drafter.
_WEIGHTS_LOADED = re.compile(r"^Model loading took (\d+(?:\.\d+)?) GiB")
_ENGINE_CONFIG = re.compile(r"^Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)$", re.DOTALL)
_MILESTONE_MARKERS = (
    ("non-default args:", "server_args"),
    ("Starting to load model", "weights_loading"),
    ("Loading weights took", "weights_loaded"),
    ("Model loading took", "weights_loaded"),
    ("Available KV cache memory:", "kv_allocated"),
    ("Maximum concurrency for", "kv_allocated"),
    ("Starting vLLM API server", "http_started"),  # `... on http://...` (0.8.5), `... 0 on http://...` (0.9.2-0.17)
    ("Starting vLLM server on", "http_started"),  # 0.19+
    ("Application startup complete.", "ready"),
    ("Shutting down FastAPI HTTP server", "shutdown"),  # <= 0.19
    ("API server: shutdown triggered", "shutdown"),  # 0.23+ `[shutdown] API server: shutdown triggered`
    ("Application shutdown complete.", "shutdown"),
)


_WORKER_RANK = re.compile(r"(?:VllmWorker rank=|TP)(\d+)\b")


def _other_rank(process: str | None) -> bool:
    """A TP worker other than rank 0: up to 0.11 each rank logs its own copy of the per-rank lines (§2.4)."""
    match = _WORKER_RANK.search(process or "")
    return match is not None and match[1] != "0"


def parse_line(line: str) -> LogFact | None:
    """The fact one log line carries (its prefixes allowed), or None for lines that carry none."""
    process, _, message = split_prefix(line)
    message = message.strip()
    if not message:
        return None
    if match := _SHARDS.search(message):
        percent, done, total = (int(group) for group in match.groups())
        return ShardProgress(percent=percent, done=done, total=total)
    if SPEC_MARKER in message:
        return parse_spec_line(message)
    if match := _CAPTURING.match(message):
        percent, done, total = (int(group) for group in match.groups())
        # vLLM logs nothing as capture begins: the bar's first state says it.
        return Milestone("graph_capture") if done == 0 else CaptureProgress(percent, done, total)
    if match := _GRAPH_CAPTURED.match(message):
        # One capture for the target and its draft, told once (rank 0's).
        return None if _other_rank(process) else GraphCaptured("target", float(match[1]))
    if match := _KV_SIZE.match(message):
        length = match[2]
        return ServerLimits(
            max_total_num_tokens=int(match[1].replace(",", "")),
            max_running_requests=None,  # --max-num-seqs is not logged
            context_len=int(length.replace(",", "")) if length else None,
        )
    if match := _WEIGHTS_LOADED.match(message):
        rank = _WORKER_RANK.search(process or "")
        return WeightsLoaded(int(rank[1]) if rank else None, float(match[1]), models="all")
    if match := _ENGINE_CONFIG.match(message):
        return ServerArgsDump(engine_config(match[1]))
    failure = failure_signal(message)
    if failure is not None:
        return failure
    for marker, name in _MILESTONE_MARKERS:
        if marker in message:
            return Milestone(name)
    return None
