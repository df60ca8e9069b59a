"""The failure a log proves: the traceback or error that ended the server, and an argparse refusal."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..engines.facts import FAILURE_KINDS, Failure
from ..engines.tracebacks import TRACEBACK_HEAD, chained_traceback_after
from .loglines import RECORD_START, clean_line, failure_signal, split_prefix

_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?::|$)")
# A multi-line exception message (e.g. "Capture cuda graph failed" and its list of remedies) is kept in
# the excerpt up to this many lines.
_MAX_MESSAGE_LINES = 12
MISCONFIGURED = "misconfigured"
# The finder's order of kinds, least to most specific; a config SGLang refused sits above a crash.
_KIND_RANK = {kind: rank for rank, kind in enumerate(("crashed", MISCONFIGURED, *FAILURE_KINDS[1:]), start=1)}
# What SGLang raises when it refuses a speculative method's settings, at start, before any model is loaded: each
# method's checks in `ServerArgs` (0.5.x `server_args.py`; era C `arg_groups/speculative_hook.py`: _handle_ngram,
# _handle_dflash, _handle_dspark, _handle_uno, _handle_eagle_family; `spec_info.py: from_string`). The run failed
# for its config, not for the host: kind "misconfigured", in SGLang's words.
_METHOD_REFUSAL = re.compile(
    r"(?:ValueError|NotImplementedError|AssertionError): (?:"
    r"Ngram speculative decoding only supports|Currently ngram speculative decoding does not support"
    r"|--speculative-ngram-external-\S+ must be positive|speculative_ngram_external_sam_budget must be"
    r"|speculative_eagle_topk\(?\d*\)? > 1 with page_size"
    r"|DFLASH requires --speculative-dflash-block-size|Both --speculative-num-draft-tokens and "
    r"--speculative-dflash-block-size|--speculative-draft-window-size must be >=|DFLASH speculative decoding requires"
    r"|Currently DFLASH speculative decoding"
    r"|DSpark requires --speculative-dspark-block-size|DSpark speculative_num_draft_tokens must"
    r"|DSpark could not resolve speculative_num_draft_tokens|DSpark (?:dense )?speculative decoding requires"
    r"|DSPARK speculative decoding requires|DSpark speculative decoding only supports|DSpark with dp attention"
    r"|Currently DSpark speculative decoding|UNO requires"
    r"|Currently standalone speculative decoding does not support|trtllm_mha backend only supports topk = 1"
    r"|Spec v2 currently only supports topk = 1|Unknown speculative algorithm name: "
    r"|--speculative-use-rejection-sampling)"
)
# Lines after a one-line failure that carry its cause: the exit code of a dead rank, a C++ exception's what(),
# CUDA's and SGLang's advice. Read after any log prefix (`[12-16 14:27:10] Exit code: -9`, multimodal era).
_CAUSE_LINE = re.compile(
    r"\s*(?:\[[^\]]*\] ?)?(?:Exit code: -?\d+|what\(\): |CUDA kernel errors might be|For debugging consider passing"
    r"|Compile with `TORCH_USE_CUDA_DSA`|Possible solutions:|\d\. |Open an issue on GitHub)"
)
# `Fatal Python error: ...` is followed by the interpreter's dump of each thread's stack.
_THREAD_DUMP_LINE = re.compile(r"(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):|\s+File ")
_MAX_CAUSE_LINES = 40
_ANY_PREFIX = re.compile(r"^\[[^\]]*\] ?")
HOST_OOM_MESSAGE = "Out of host memory (the kernel's OOM killer, not GPU memory)"


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
        if not text or RECORD_START.match(text) or not _EXCEPTION_LINE.match(text):
            break
        exception_line = end = index
        index += 1
        while index < len(texts) and index - exception_line <= _MAX_MESSAGE_LINES:
            text = texts[index]
            if not text.strip() or RECORD_START.match(text) or text.startswith(TRACEBACK_HEAD):
                break
            end = index
            index += 1
        # Skip to a chained traceback, if one follows.
        chained = chained_traceback_after(texts, index)
        if chained is not None:
            index = chained
            continue
        break
    return end, exception_line


def _cause_lines(texts: Sequence[str], start: int, *, thread_dump: bool) -> int:
    """The last line that still belongs to the one-line failure at start (its cause), else start."""
    end = start
    index = start + 1
    while index < len(texts) and index - start <= _MAX_CAUSE_LINES:
        text = texts[index]
        if _CAUSE_LINE.match(text) or (thread_dump and _THREAD_DUMP_LINE.match(text)):
            end = index
        elif not (thread_dump and not text.strip()):
            break
        index += 1
    return end


def _bare(text: str) -> str:
    """A line without a log prefix, also one `split_prefix` does not know (`[12-16 14:27:10] `)."""
    return _ANY_PREFIX.sub("", split_prefix(text.strip())[2], count=1).strip()


def _named(tp_rank: int | None, message: str) -> str:
    return message if tp_rank is None else f"TP{tp_rank}: {message}"


def find_failure(lines: Sequence[str]) -> Failure | None:
    """The evidence of a failed server in a window of recent log lines, or None.

    Tracebacks (including `Scheduler hit an exception: Traceback ...`) and lone lines (`Received sigquit`,
    OOM text, a watchdog, `terminate called ...`, `Fatal Python error`, ...) are candidates; a lone line takes
    the lines after it that carry its cause (an exit code, `what():`, the thread dump). The most specific kind
    wins (context_length, oom, host_oom, crashed); within a kind a traceback with its exception line beats a
    cut-off one, which beats a lone line; then the earliest, which is nearest the cause. A rank killed with
    SIGKILL is the host's OOM killer only when it is the first evidence: after another failure it is SGLang
    tearing its processes down. The message names the TP rank whose line it is.
    """
    texts = [clean_line(line) for line in lines]
    candidates: list[tuple[tuple[int, int, int], Failure]] = []
    index = 0
    while index < len(texts):
        _, tp_rank, message = split_prefix(texts[index])
        if TRACEBACK_HEAD in message:
            end, exception_line = _traceback_block(texts, index)
            block = [message, *texts[index + 1 : end + 1]]
            kind, evidence = "crashed", None
            for text in block:
                if text[:1].isspace():
                    continue  # source lines of frames quote the code that raises, not what happened
                signal = failure_signal(text)
                if signal is not None and _KIND_RANK[signal.kind] > _KIND_RANK[kind]:
                    kind, evidence = signal.kind, signal.message
            if evidence is None:
                evidence = texts[exception_line].strip() if exception_line is not None else message.strip()
                if exception_line is not None and _METHOD_REFUSAL.match(evidence):
                    kind = MISCONFIGURED
            strength = 2 if exception_line is not None else 1
            failure = Failure(kind, _named(tp_rank, evidence), first_line=index, last_line=end)
            candidates.append(((_KIND_RANK[kind], strength, -index), failure))
            index = end + 1
            continue
        signal = failure_signal(message)
        if signal is None:
            index += 1
            continue
        end = _cause_lines(texts, index, thread_dump=signal.message.startswith("Fatal Python error"))
        causes = [_bare(text) for text in texts[index + 1 : end + 1] if text.strip()]
        signals = [signal, *filter(None, map(failure_signal, causes))]
        kind = max((s.kind for s in signals), key=_KIND_RANK.__getitem__)
        evidence = " ".join(
            [_bare(signal.message), *causes[:2]]
        )  # the first cause lines say it; a dump is the excerpt's
        if kind == "host_oom" and candidates:
            kind = "crashed"
        if kind == "host_oom":
            evidence = f"{HOST_OOM_MESSAGE}: {evidence}"
        failure = Failure(kind, _named(tp_rank, evidence), first_line=index, last_line=end)
        candidates.append(((_KIND_RANK[kind], 0, -index), failure))
        index = end + 1
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
        return Failure(kind=MISCONFIGURED, message=match.group("message"), first_line=usage, last_line=index)
    return None
