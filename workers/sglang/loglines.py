"""One log line at a time: its prefix (time, TP rank), and the fact it carries, if any."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from ..engines.facts import (
    CaptureProgress,
    DecodeStats,
    FailureSignal,
    GraphCaptured,
    LogFact,
    Milestone,
    PrefillStats,
    Retraction,
    ServerArgsDump,
    ServerLimits,
    ShardProgress,
    WeightsLoaded,
)

# `[%Y-%m-%d %H:%M:%S]`, `.mmm` with SGLANG_LOG_MS, then rank parts such as ` DP0 PP0 TP3 EP1`.
_PREFIX = re.compile(
    r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)((?: [A-Z][A-Z_]*\d+)*)\] ?(.*)",
    re.DOTALL,
)
RECORD_START = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
_TP_PART = re.compile(r" TP(\d+)\b")


def split_prefix(line: str) -> tuple[str | None, int | None, str]:
    """`[2026-02-23 10:00:00 TP3] msg` -> ("2026-02-23 10:00:00", 3, "msg"); no prefix -> (None, None, line).

    The timestamp is returned as printed, milliseconds included when SGLANG_LOG_MS added them. The TP rank
    is None when the prefix has no TP part (main process, or a tp=1 scheduler).
    """
    match = _PREFIX.fullmatch(line)
    if match is None:
        return None, None, line
    timestamp, parts, message = match.groups()
    tp_match = _TP_PART.search(parts)
    return timestamp, int(tp_match.group(1)) if tp_match else None, message


def clean_line(line: str) -> str:
    """The part of a physical line worth parsing.

    tqdm redraws with `\\r`, so a line may hold many states of one bar: the last one is current. A log line
    written right after an unterminated bar (another process, same file) starts mid-line: cut to its prefix.
    """
    line = line.rstrip("\r\n")
    if "\r" in line:
        segments = [segment for segment in line.split("\r") if segment.strip()]
        line = segments[-1] if segments else ""
    if not line.startswith("["):
        embedded = RECORD_START.search(line)
        if embedded is not None:
            line = line[embedded.start() :]
    return line


# --- one line ----------------------------------------------------------------------------------------

_SHARDS = re.compile(r"shards:\s*(\d{1,3})% Completed \| (\d+)/(\d+)")
# SGLANG_LOG_FORWARD_ITERS inserts ` [N]` after the batch kind.
_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,] ")
_PREFILL = re.compile(r"Prefill batch(?: \[\d+\])?[.,] ")
_GRAPH_CAPTURE_BEGIN = re.compile(r"Capture .*cuda graph begin", re.IGNORECASE)
_CAPTURING = re.compile(r"^Capturing batches \(.*?\):\s*(\d{1,3})%\|.*?\|\s*(\d+)/(\d+)")
# Eras A/B `Capture [draft [extend ]]cuda graph end. Time elapsed: 18.28 s.`; era C
# `Capture {target decode|target verify|draft decode|draft extend} CUDA graph end. elapsed=4.56 s,`.
_GRAPH_CAPTURE_END = re.compile(
    r"^Capture (?P<what>(?:\w+ )*?)cuda graph end\.(?: Time elapsed: | .*?elapsed=)(?P<elapsed>[\d.]+) s",
    re.IGNORECASE,
)
_LIMITS = re.compile(r"^max_total_num_tokens=(\d+),")
_WEIGHTS_LOADED = re.compile(r"^Load weight end\..*?\bmem usage=(\d+(?:\.\d+)?) GB")
_RETRACT = re.compile(r"KV cache pool is full\. Retract requests\.(?:.*?#retracted_reqs: (\d+))?")
_MILESTONE_MARKERS = (
    ("Load weight begin", "weights_loading"),
    ("Load weight end", "weights_loaded"),
    ("KV Cache is allocated", "kv_allocated"),
    ("Uvicorn running on", "http_started"),
    ("The server is fired up and ready to roll", "ready"),
    ("SIGTERM received", "shutdown"),
)
# Only the raised ValueError fails a launch; with SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN the same text
# is logged as a mere warning.
_CONTEXT_LENGTH_ERROR = re.compile(r"ValueError: .*context_length \(\d+\) is greater than the derived context_length")
_GPU_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
    r"|Not enough memory\. Please try to increase --mem-fraction-static",
    re.IGNORECASE,
)
# "Capture cuda graph failed: <cause>" wraps whatever broke during capture (GPU memory, a gloo/NCCL connection,
# an illegal memory access); only a memory cause is oom, the rest is a crash with SGLang's words.
_GRAPH_CAPTURE_FAILED = re.compile(r"Capture (?:\w+ )*cuda graph failed", re.IGNORECASE)
# The kernel's OOM killer sends SIGKILL: the shell reports `Killed` (alone, after a bar, or `line 5: 123 Killed`),
# SGLang a rank's exit code -9. "If exit code is -9 (SIGKILL), ..." is SGLang's hint, not the code itself.
_HOST_OOM = re.compile(
    r"(?:^|[\]|]|: \d+ )Killed(?:\s|$)|exit code:? -9\b|killed by signal 9\b|Out of memory: Killed process",
    re.IGNORECASE,
)
_CRASH = re.compile(
    r"hit an exception|Traceback \(most recent call last\)|Received sigquit from a child process"
    r"|SIGQUIT received|scheduler is dead|scheduler died during initialization|crashed with exit code"
    r"|Initialization failed\. warmup error|watchdog timeout(?!.*soft=True)"
    # torch.distributed's watchdogs (NCCL/c10d), C++ aborts and the interpreter's own fatal errors
    r"|Watchdog caught collective operation timeout|Process group watchdog thread terminated"
    r"|watchdog got stuck for \d+ seconds|terminate called after throwing an instance of|^Fatal Python error: "
)


def failure_signal(message: str) -> FailureSignal | None:
    text = message.strip()
    if _CONTEXT_LENGTH_ERROR.search(text):
        return FailureSignal("context_length", text)
    if _GPU_OOM.search(text):
        return FailureSignal("oom", text)
    if _HOST_OOM.search(text):
        return FailureSignal("host_oom", text)
    if _GRAPH_CAPTURE_FAILED.search(text) or _CRASH.search(text):
        return FailureSignal("crashed", text)
    return None


def _stat_fields(text: str) -> dict[str, str]:
    """`#running-req: 1, #token: 108, token usage: 0.00, ` -> {"#running-req": "1", ...}."""
    fields: dict[str, str] = {}
    for item in text.split(", "):
        key, separator, value = item.partition(": ")
        if separator:
            fields[key.strip()] = value.strip().rstrip(",")
    return fields


def _int(fields: Mapping[str, str], key: str) -> int | None:
    try:
        return int(fields[key])
    except (KeyError, ValueError):
        return None


def _float(fields: Mapping[str, str], *keys: str) -> float | None:
    for key in keys:
        if key in fields:
            try:
                return float(fields[key])
            except ValueError:
                return None
    return None


def _decode_stats(text: str) -> DecodeStats | None:
    fields = _stat_fields(text)
    running_req = _int(fields, "#running-req")
    tokens = _int(fields, "#token")
    queue_req = _int(fields, "#queue-req")
    # Hybrid models (SWA, mamba) report the full-attention pool as `full token usage`.
    token_usage = _float(fields, "token usage", "full token usage")
    gen_throughput = _float(fields, "gen throughput (token/s)")
    if running_req is None or tokens is None or queue_req is None or token_usage is None or gen_throughput is None:
        return None
    graph = next((fields[key] for key in ("cuda graph", "npu graph", "cpu graph") if key in fields), None)
    return DecodeStats(
        running_req=running_req,
        tokens=tokens,
        token_usage=token_usage,
        accept_len=_float(fields, "accept len"),
        accept_rate=_float(fields, "accept rate"),
        cuda_graph=None if graph is None else graph == "True",
        gen_throughput=gen_throughput,
        queue_req=queue_req,
    )


def _prefill_stats(text: str) -> PrefillStats | None:
    fields = _stat_fields(text)
    keys = ("#new-seq", "#new-token", "#cached-token", "#running-req", "#queue-req")
    values = [_int(fields, key) for key in keys]
    if any(value is None for value in values):
        return None
    new_seq, new_token, cached_token, running_req, queue_req = (int(value or 0) for value in values)
    return PrefillStats(new_seq, new_token, cached_token, running_req, queue_req)


def parse_decode_line(line: str) -> tuple[str | None, DecodeStats] | None:
    """(its timestamp, its stats) for a `Decode batch` line, else None: the Decode branch of `parse_line` alone, for
    a flood's batch lines, which are known to carry the marker (no other fact is looked for)."""
    timestamp, _, message = split_prefix(clean_line(line))
    message = message.strip()
    decode = _DECODE.match(message)
    if decode is None:
        return None
    stats = _decode_stats(message[decode.end() :])
    return None if stats is None else (timestamp, stats)


def parse_line(line: str) -> LogFact | None:
    """The fact one log line carries (its prefix allowed), or None for lines that carry none."""
    _, rank, message = split_prefix(clean_line(line))
    message = message.strip()
    if not message:
        return None
    if match := _WEIGHTS_LOADED.match(message):
        return WeightsLoaded(rank, float(match[1]))
    shards = _SHARDS.search(message)
    if shards is not None:
        percent, done, total = (int(group) for group in shards.groups())
        return ShardProgress(percent=percent, done=done, total=total)
    decode = _DECODE.match(message)
    if decode is not None:
        return _decode_stats(message[decode.end() :])
    prefill = _PREFILL.match(message)
    if prefill is not None:
        return _prefill_stats(message[prefill.end() :])
    capture = _capture_fact(message)
    if capture is not None:
        return capture
    if message.startswith("server_args="):
        args = _server_args(message[len("server_args=") :])
        return Milestone("server_args") if args is None else ServerArgsDump(args)
    failure = failure_signal(message)
    if failure is not None:
        return failure
    if _GRAPH_CAPTURE_BEGIN.match(message):
        return Milestone("graph_capture")
    for marker, name in _MILESTONE_MARKERS:
        if marker in message:
            return Milestone(name)
    return None


def _capture_fact(message: str) -> LogFact | None:
    """The capture bar, a capture's end, the pool sizes, a retraction: the lines worth reading besides batches."""
    if match := _CAPTURING.match(message):
        percent, done, total = (int(group) for group in match.groups())
        return CaptureProgress(percent, done, total)
    if match := _GRAPH_CAPTURE_END.match(message):
        which = "draft" if "draft" in match.group("what").lower() else "target"
        return GraphCaptured(which, float(match.group("elapsed")))
    if _LIMITS.match(message):
        fields = dict(item.partition("=")[::2] for item in message.split(", "))
        return ServerLimits(
            max_total_num_tokens=int(fields["max_total_num_tokens"]),
            max_running_requests=_int(fields, "max_running_requests"),
            context_len=_int(fields, "context_len"),
        )
    if match := _RETRACT.search(message):
        return Retraction(int(match.group(1)) if match.group(1) else None, message)
    return None


# --- server_args dump --------------------------------------------------------------------------------

_NON_LITERAL_FLOATS = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


def _literal(text: str) -> Any:
    """A Python literal from a repr, or the text itself when it is not one (enums, objects, `...`)."""
    text = text.strip()
    if text in _NON_LITERAL_FLOATS:
        return _NON_LITERAL_FLOATS[text]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _split_top_level(text: str, separator: str, maxsplit: int = -1) -> list[str]:
    """Split at separator outside brackets and string literals: `a=[1, 2], b='x, y'` -> two pieces."""
    pieces: list[str] = []
    depth = 0
    angle_depth = 0  # reprs such as <LoadFormat.AUTO: 'auto'>
    quote = ""
    start = 0
    index = 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "<" and text[index + 1 : index + 2].isalpha():
            angle_depth += 1
        elif char == ">" and angle_depth:
            angle_depth -= 1
        elif char == separator and depth == 0 and angle_depth == 0 and maxsplit != len(pieces):
            pieces.append(text[start:index])
            start = index + 1
        index += 1
    pieces.append(text[start:])
    return [piece.strip() for piece in pieces if piece.strip()]


def _server_args(dump: str) -> dict[str, Any] | None:
    """`ServerArgs(model_path='/m', tp_size=8, ...)` (eras A/B) or `{'model_path': '/m', ...}` (era C)."""
    dump = dump.strip()
    args: dict[str, Any] = {}
    if dump.startswith("ServerArgs("):
        inner = dump[len("ServerArgs(") :]
        inner = inner[:-1] if inner.endswith(")") else inner  # a truncated line keeps what it has
        for piece in _split_top_level(inner, ","):
            key, separator, value = piece.partition("=")
            if separator and key.strip().isidentifier():
                args[key.strip()] = _literal(value)
        return args
    if dump.startswith("{"):
        whole = _literal(dump)
        if isinstance(whole, dict):
            return {str(key): value for key, value in whole.items()}
        inner = dump[1:-1] if dump.endswith("}") else dump[1:]
        for piece in _split_top_level(inner, ","):
            key_and_value = _split_top_level(piece, ":", maxsplit=1)
            if len(key_and_value) == 2:
                args[str(_literal(key_and_value[0]))] = _literal(key_and_value[1])
        return args
    return None
