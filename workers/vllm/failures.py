"""The failure a vLLM log proves: the root cause of a failed start or a dead engine, and a refused command line.

A failed start is told three times (../shared/reference/vllm-interface.md §4.1): the root exception in EngineCore or a
worker (`EngineCore failed to start.` + its traceback, or `WorkerProc failed to start.`), Python's own traceback of
the dead process (`Process EngineCore_DP0:`), and last the API server's `RuntimeError: Engine core initialization
failed. See root cause above.`. The last words are a wrapper: the message reported is the root cause's, above it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..engines.facts import FAILURE_KINDS, Failure
from ..engines.tracebacks import TRACEBACK_HEAD, chained_traceback_after
from .loglines import failure_signal, split_prefix

MISCONFIGURED = "misconfigured"
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?::|$)")
# A config refused at start in the API server, before any engine exists (§1.2, §4.1): pydantic's block, or 0.8.5's
# dataclass TypeError for an unknown key.
_VALIDATION = re.compile(r"ValidationError: \d+ validation errors? for SpeculativeConfig")
_UNKNOWN_KEY = re.compile(r"TypeError: .*SpeculativeConfig.*unexpected keyword argument")
# What vLLM raises when it refuses a speculative method's settings (vllm/config/speculative.py:
# SpeculativeConfig.__post_init__ for ngram's lookup lengths, _validate_suffix_decoding for suffix and its Arctic
# Inference package; the draft_model proposer's vocabulary check, 0.17+; vllm-interface.md §4.3, §4.4): outside
# pydantic's block too (an ImportError is not wrapped), the config's fault.
_METHOD_REFUSAL = re.compile(
    r"Arctic Inference is required for suffix decoding|suffix_decoding_\w+=\S+ must be"
    r"|prompt_lookup_(?:min|max)=\S+ must be|Either prompt_lookup_max or prompt_lookup_min must be provided"
    r"|Target and draft model should have the same vocabulary size|Unknown speculative decoding method"
    r"|Speculative decoding with draft model is not supported yet"
)
_PYDANTIC_TYPE = re.compile(r"\s*\[type=[^\]]*\]?.*$")
# Words that only point at a failure told elsewhere (above, or in another process): evidence of the last resort.
_WRAPPER = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|WorkerProc failed to start"
    r"|WorkerProc initialization failed|EngineCore encountered (?:a fatal error|an issue)|EngineDeadError"
    r"|died unexpectedly|AsyncLLM output_handler failed"
)
# Lines after a one-line failure that carry its cause (a C++ exception's what(), CUDA's advice).
_CAUSE_LINE = re.compile(
    r"\s*(?:what\(\): |CUDA kernel errors might be|For debugging consider passing|Compile with `TORCH_USE_CUDA_DSA`)"
)
_MAX_MESSAGE_LINES = 12
_MAX_CAUSE_LINES = 6
# The finder's order of kinds, least to most specific; a refused config sits above a crash.
_KIND_RANK = {kind: rank for rank, kind in enumerate(("crashed", MISCONFIGURED, *FAILURE_KINDS[1:]), start=1)}
HOST_OOM_MESSAGE = "Out of host memory (the kernel's OOM killer, not GPU memory)"


def _messages(lines: Sequence[str]) -> list[str]:
    return [split_prefix(line)[2] for line in lines]


def _traceback_block(texts: Sequence[str], start: int) -> tuple[int, int | None]:
    """The last line of the traceback starting at `start` and its exception line, if the window holds it.

    Frames are indented; the exception line is the first flush-left one after them, followed by the lines of its
    message (pydantic's field and error lines); a chained traceback is followed to the last exception.
    """
    end, exception_line, index = start, None, start + 1
    while index < len(texts):
        text = texts[index]
        if text[:1].isspace():
            end, index = index, index + 1
            continue
        if not _EXCEPTION_LINE.match(text):
            break
        exception_line = end = index
        index += 1
        validation = "validation error" in text
        while index < len(texts) and index - exception_line <= _MAX_MESSAGE_LINES:
            text = texts[index]
            if not text.strip() or text.startswith(TRACEBACK_HEAD):
                break
            # pydantic's message: a field name flush left, then its error indented.
            if not (text[:1].isspace() or (validation and text.strip().replace(".", "").isidentifier())):
                break
            end, index = index, index + 1
        chained = chained_traceback_after(texts, index)
        if chained is not None:
            index = chained
            continue
        break
    return end, exception_line


def _exception_message(texts: Sequence[str], exception_line: int, end: int) -> str:
    """The exception line, and for pydantic's block its fields and errors on one line, without `[type=...]`."""
    head = texts[exception_line].strip()
    if "validation error" not in head:
        return head
    details = [_PYDANTIC_TYPE.sub("", text).strip() for text in texts[exception_line + 1 : end + 1]]
    details = [d for d in details if d and not d.startswith("For further information")]
    return "; ".join([head, *details])


def _traceback_failure(texts: Sequence[str], index: int) -> tuple[tuple[int, int, int], Failure, int]:
    end, exception_line = _traceback_block(texts, index)
    kind, evidence = "crashed", None
    for i in range(index, end + 1):
        text = texts[i]
        # A frame's source line quotes the code that raises, not what happened; the exception's own indented lines
        # (pydantic's errors) say what happened.
        if text[:1].isspace() and (exception_line is None or i <= exception_line):
            continue
        signal = failure_signal(text)
        if signal is not None and _KIND_RANK[signal.kind] > _KIND_RANK[kind]:
            kind, evidence = signal.kind, signal.message
    if exception_line is None:
        message, strength = texts[index].strip(), 1
    else:
        message = _exception_message(texts, exception_line, end)
        strength = 0 if _WRAPPER.search(message) else 3
        refused = _VALIDATION.search(message) or _UNKNOWN_KEY.search(message) or _METHOD_REFUSAL.search(message)
        if kind == "crashed" and refused:
            kind = MISCONFIGURED
    if kind not in ("crashed", MISCONFIGURED) and evidence is not None and exception_line is None:
        message = evidence
    return (_KIND_RANK[kind], strength, -index), Failure(kind, message, index, end), end


def _cause_end(texts: Sequence[str], start: int) -> int:
    end, index = start, start + 1
    while index < len(texts) and index - start <= _MAX_CAUSE_LINES and _CAUSE_LINE.match(texts[index]):
        end, index = index, index + 1
    return end


def find_failure(lines: Sequence[str]) -> Failure | None:
    """The evidence of a failed server in a window of recent log lines, or None.

    Tracebacks and lone lines (OOM text, `Engine core proc EngineCore_DP0 died unexpectedly`, `NCCL error`,
    `Fatal Python error`, ...) are candidates. The most specific kind wins (context_length, oom, host_oom, a refused
    speculative config as "misconfigured", crashed); within a kind a traceback with its own exception beats a cut-off
    one, which beats a lone line, which beats a wrapper that only points at a cause told elsewhere (`Engine core
    initialization failed. See root cause above.`); then the earliest, which is nearest the cause. A process killed by
    the OOM killer is the host's memory only when it is the first evidence: after another failure it is teardown.
    """
    texts = _messages(lines)
    candidates: list[tuple[tuple[int, int, int], Failure]] = []
    index = 0
    while index < len(texts):
        text = texts[index]
        if text.strip().startswith(TRACEBACK_HEAD):
            rank, failure, end = _traceback_failure(texts, index)
            candidates.append((rank, failure))
            index = end + 1
            continue
        signal = failure_signal(text)
        if signal is None or text[:1].isspace():
            index += 1
            continue
        end = _cause_end(texts, index)
        kind = signal.kind
        message = " ".join([signal.message, *(texts[i].strip() for i in range(index + 1, end + 1))][:3])
        if kind == "host_oom" and candidates:
            kind = "crashed"
        elif kind == "host_oom":
            message = f"{HOST_OOM_MESSAGE}: {message}"
        strength = 0 if kind == "crashed" and _WRAPPER.search(message) else 2
        candidates.append(((_KIND_RANK[kind], strength, -index), Failure(kind, message, index, end)))
        index = end + 1
    if not candidates:
        return None
    return max(candidates, key=lambda candidate: candidate[0])[1]


# argparse's refusal: `usage: vllm ...` then `vllm: error: unrecognized arguments: --foo` (exit status 2, §1.4).
_ARGPARSE_ERROR = re.compile(r"^\S+: error: (?P<message>.+)$")


def find_usage_error(lines: Sequence[str]) -> Failure | None:
    """vLLM refused its command line, as kind "misconfigured" in its own words: argparse's `vllm: error: ...` with the
    usage block as the excerpt, or pydantic's `ValidationError ... for SpeculativeConfig` (a key of
    `--speculative-config` it does not know, or a value it refuses) with its traceback."""
    texts = _messages(lines)
    for index, text in enumerate(texts):
        match = _ARGPARSE_ERROR.match(text.strip())
        if match is not None:
            usage = next((i for i in range(index, -1, -1) if texts[i].lstrip().startswith("usage:")), index)
            return Failure(MISCONFIGURED, match.group("message"), first_line=usage, last_line=index)
    for index, text in enumerate(texts):
        if text.strip().startswith(TRACEBACK_HEAD):
            _, failure, _ = _traceback_failure(texts, index)
            if failure.kind == MISCONFIGURED:
                return failure
    return None
