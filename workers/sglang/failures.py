"""The failure a log proves: the traceback or error that ended the server, and an argparse refusal."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .facts import Failure
from .loglines import RECORD_START, clean_line, failure_signal, split_prefix

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
        if not text or RECORD_START.match(text) or not _EXCEPTION_LINE.match(text):
            break
        exception_line = end = index
        index += 1
        while index < len(texts) and index - exception_line <= _MAX_MESSAGE_LINES:
            text = texts[index]
            if not text.strip() or RECORD_START.match(text) or text.startswith(_TRACEBACK_HEAD):
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
    texts = [clean_line(line) for line in lines]
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
                signal = failure_signal(text)
                if signal is not None and _KIND_RANK[signal.kind] > _KIND_RANK[kind]:
                    kind, evidence = signal.kind, signal.message
            if evidence is None:
                evidence = texts[exception_line].strip() if exception_line is not None else message.strip()
            strength = 2 if exception_line is not None else 1
            failure = Failure(kind=kind, message=evidence, first_line=index, last_line=end)
            candidates.append(((_KIND_RANK[kind], strength, -index), failure))
            index = end + 1
            continue
        signal = failure_signal(message)
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
