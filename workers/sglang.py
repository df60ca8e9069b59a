"""The SGLang adapter: the launch command, and the facts carried by the lines a server logs.

Pure: no Django and no I/O, so the orchestrator, the tests and the simulator agree on one reading of the
log. Formats follow ../shared/reference/sglang-interface.md (§3, §4) for all three eras: 0.4.x-0.5.3
(`Decode batch.`), 0.5.4-0.5.12 (`Decode batch,`) and 0.5.14+ (arg groups, new capture lines).
Nothing here raises on unexpected text: a log is whatever the host wrote, progress-bar debris included.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# --- launch ------------------------------------------------------------------------------------------

_MODEL_FLAGS = (
    ("model_path", "--model-path"),
    ("served_model_name", "--served-model-name"),
    ("tp_size", "--tp-size"),
)
_SPECULATIVE_FLAGS = (
    ("speculative_algorithm", "--speculative-algorithm"),
    ("speculative_draft_model_path", "--speculative-draft-model-path"),
    ("speculative_num_steps", "--speculative-num-steps"),
    ("speculative_eagle_topk", "--speculative-eagle-topk"),
    ("speculative_num_draft_tokens", "--speculative-num-draft-tokens"),
)


def _is_set(value: Any) -> bool:
    return value is not None and value != ""


def launch_argv(config: Mapping[str, Any], *, host: str, port: int) -> list[str]:
    """The `sglang.launch_server` flags for config; the caller prepends the launcher and quotes.

    Unset options are omitted so SGLang's own defaults (and auto-choices) apply. A baseline (no
    speculative_algorithm) gets no speculative flag at all, even if draft settings were left in config:
    a draft path without an algorithm would only make the effective args disagree with the intent.
    """
    if not _is_set(config.get("model_path")):
        raise ValueError("config needs a model_path")
    argv: list[str] = []
    for key, flag in _MODEL_FLAGS:
        if _is_set(config.get(key)):
            argv += [flag, str(config[key])]
    argv += ["--host", host, "--port", str(port)]
    if _is_set(config.get("speculative_algorithm")):
        for key, flag in _SPECULATIVE_FLAGS:
            if _is_set(config.get(key)):
                argv += [flag, str(config[key])]
    extra_args = config.get("extra_args") or []
    if isinstance(extra_args, str):
        # A string would silently become one flag per character.
        raise TypeError("extra_args must be a list of strings, not a string")
    argv += [str(arg) for arg in extra_args]
    return argv


# --- facts -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardProgress:
    percent: int
    done: int
    total: int


@dataclass(frozen=True)
class DecodeStats:
    running_req: int
    tokens: int
    token_usage: float
    accept_len: float | None
    accept_rate: float | None
    cuda_graph: bool | None
    gen_throughput: float
    queue_req: int


@dataclass(frozen=True)
class PrefillStats:
    new_seq: int
    new_token: int
    cached_token: int
    running_req: int
    queue_req: int


MILESTONES = (
    "server_args",
    "weights_loading",
    "weights_loaded",
    "graph_capture",
    "kv_allocated",
    "http_started",
    "ready",
    "shutdown",
)


@dataclass(frozen=True)
class Milestone:
    name: str  # one of MILESTONES


@dataclass(frozen=True)
class ServerArgsDump:
    """The effective server args a server logged at start. Also marks the "server_args" milestone."""

    args: dict[str, Any]


FAILURE_KINDS = ("crashed", "oom", "context_length")


@dataclass(frozen=True)
class FailureSignal:
    kind: str  # one of FAILURE_KINDS
    message: str


LogFact = ShardProgress | DecodeStats | PrefillStats | Milestone | ServerArgsDump | FailureSignal


@dataclass(frozen=True)
class Failure:
    """The evidence of a failed server: lines[first_line : last_line + 1] prove it."""

    kind: str
    message: str
    first_line: int
    last_line: int


# --- line prefix -------------------------------------------------------------------------------------

# `[%Y-%m-%d %H:%M:%S]`, `.mmm` with SGLANG_LOG_MS, then rank parts such as ` DP0 PP0 TP3 EP1`.
_PREFIX = re.compile(
    r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)((?: [A-Z][A-Z_]*\d+)*)\] ?(.*)",
    re.DOTALL,
)
_PREFIX_START = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
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


def _clean(line: str) -> str:
    """The part of a physical line worth parsing.

    tqdm redraws with `\\r`, so a line may hold many states of one bar: the last one is current. A log line
    written right after an unterminated bar (another process, same file) starts mid-line: cut to its prefix.
    """
    line = line.rstrip("\r\n")
    if "\r" in line:
        segments = [segment for segment in line.split("\r") if segment.strip()]
        line = segments[-1] if segments else ""
    if not line.startswith("["):
        embedded = _PREFIX_START.search(line)
        if embedded is not None:
            line = line[embedded.start() :]
    return line


# --- one line ----------------------------------------------------------------------------------------

_SHARDS = re.compile(r"shards:\s*(\d{1,3})% Completed \| (\d+)/(\d+)")
# SGLANG_LOG_FORWARD_ITERS inserts ` [N]` after the batch kind.
_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,] ")
_PREFILL = re.compile(r"Prefill batch(?: \[\d+\])?[.,] ")
_GRAPH_CAPTURE_BEGIN = re.compile(r"Capture .*cuda graph begin", re.IGNORECASE)
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
_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|Capture (?:\w+ )*cuda graph failed"
    r"|Not enough memory\. Please try to increase --mem-fraction-static",
    re.IGNORECASE,
)
_CRASH = re.compile(
    r"hit an exception|Traceback \(most recent call last\)|Received sigquit from a child process"
    r"|SIGQUIT received|scheduler is dead|scheduler died during initialization|crashed with exit code"
    r"|Initialization failed\. warmup error|watchdog timeout(?!.*soft=True)"
)


def _failure_signal(message: str) -> FailureSignal | None:
    text = message.strip()
    if _CONTEXT_LENGTH_ERROR.search(text):
        return FailureSignal("context_length", text)
    if _OOM.search(text):
        return FailureSignal("oom", text)
    if _CRASH.search(text):
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


def parse_line(line: str) -> LogFact | None:
    """The fact one log line carries (its prefix allowed), or None for lines that carry none."""
    _, _, message = split_prefix(_clean(line))
    message = message.strip()
    if not message:
        return None
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
    if message.startswith("server_args="):
        args = _server_args(message[len("server_args=") :])
        return Milestone("server_args") if args is None else ServerArgsDump(args)
    failure = _failure_signal(message)
    if failure is not None:
        return failure
    if _GRAPH_CAPTURE_BEGIN.match(message):
        return Milestone("graph_capture")
    for marker, name in _MILESTONE_MARKERS:
        if marker in message:
            return Milestone(name)
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


# --- failure evidence --------------------------------------------------------------------------------

_TRACEBACK_HEAD = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?::|$)")
# A multi-line exception message (e.g. "Capture cuda graph failed" and its list of remedies) is kept in
# the excerpt up to this many lines.
_MAX_MESSAGE_LINES = 12
_KIND_RANK = {"crashed": 1, "oom": 2, "context_length": 3}


def _traceback_block(texts: Sequence[str], start: int) -> tuple[int, int | None]:
    """The last line of the traceback starting at start, and its final `ExcType: msg` line if present.

    Frames are indented; the exception line is the first flush-left line after them; chained tracebacks
    ("During handling of the above exception...") are followed to the last exception.
    """
    end = start
    exception_line: int | None = None
    index = start + 1
    while index < len(texts):
        text = texts[index]
        if text[:1].isspace():
            end = index
            index += 1
            continue
        if not text or _PREFIX_START.match(text) or not _EXCEPTION_LINE.match(text):
            break
        exception_line = end = index
        index += 1
        while index < len(texts) and index - exception_line <= _MAX_MESSAGE_LINES:
            text = texts[index]
            if not text.strip() or _PREFIX_START.match(text) or text.startswith(_TRACEBACK_HEAD):
                break
            end = index
            index += 1
        # Skip to a chained traceback, if one follows.
        look = index
        while look < len(texts) and not texts[look].strip():
            look += 1
        if look < len(texts) and texts[look].startswith(_CHAINED):
            look += 1
            while look < len(texts) and not texts[look].strip():
                look += 1
            if look < len(texts) and texts[look].startswith(_TRACEBACK_HEAD):
                index = look + 1
                continue
        break
    return end, exception_line


def find_failure(lines: Sequence[str]) -> Failure | None:
    """The evidence of a failed server in a window of recent log lines, or None.

    Tracebacks (including `Scheduler hit an exception: Traceback ...`) and lone lines (`Received sigquit`,
    OOM text, ...) are candidates. The most specific kind wins (context_length, then oom, then crashed);
    within a kind a traceback with its exception line beats a cut-off one, which beats a lone line;
    then the earliest, which is nearest the cause.
    """
    texts = [_clean(line) for line in lines]
    candidates: list[tuple[tuple[int, int, int], Failure]] = []
    index = 0
    while index < len(texts):
        _, _, message = split_prefix(texts[index])
        if _TRACEBACK_HEAD in message:
            end, exception_line = _traceback_block(texts, index)
            block = [message, *texts[index + 1 : end + 1]]
            kind, evidence = "crashed", None
            for text in block:
                if text[:1].isspace():
                    continue  # source lines of frames quote the code that raises, not what happened
                signal = _failure_signal(text)
                if signal is not None and _KIND_RANK[signal.kind] > _KIND_RANK[kind]:
                    kind, evidence = signal.kind, signal.message
            if evidence is None:
                evidence = texts[exception_line].strip() if exception_line is not None else message.strip()
            strength = 2 if exception_line is not None else 1
            failure = Failure(kind=kind, message=evidence, first_line=index, last_line=end)
            candidates.append(((_KIND_RANK[kind], strength, -index), failure))
            index = end + 1
            continue
        signal = _failure_signal(message)
        if signal is not None:
            failure = Failure(kind=signal.kind, message=signal.message, first_line=index, last_line=index)
            candidates.append(((_KIND_RANK[signal.kind], 0, -index), failure))
        index += 1
    if not candidates:
        return None
    return max(candidates, key=lambda candidate: candidate[0])[1]


# argparse's refusal: "usage: ..." (one or more lines) then "<prog>: error: <message>", exit status 2.
_ARGPARSE_ERROR = re.compile(r"^\S+: error: (?P<message>.+)$")


def find_usage_error(lines: Sequence[str]) -> Failure | None:
    """The launcher refused its command line (unknown, removed or ambiguous flag): SGLang's own words, as kind
    "misconfigured", with the usage block as the excerpt."""
    for index, line in enumerate(lines):
        match = _ARGPARSE_ERROR.match(line.strip())
        if match is None:
            continue
        usage = next((i for i in range(index, -1, -1) if lines[i].lstrip().startswith("usage:")), index)
        return Failure(kind="misconfigured", message=match.group("message"), first_line=usage, last_line=index)
    return None


def arg_mismatches(requested: dict[str, Any], effective: dict[str, Any]) -> list[str]:
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


def flag_int(args: list[str], flag: str) -> int | None:
    """The integer value of `flag` in extra launch args (`--flag N` or `--flag=N`); None if absent or not one."""
    for i, arg in enumerate(args):
        value = None
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit():
            return int(value)
    return None
