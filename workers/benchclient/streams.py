"""The response streams of a generation request, parsed as they arrive: SGLang's native `/generate` events and
OpenAI-compatible `/v1/completions` chunks, both as server-sent events, each recording its tokens' times.

For the native backend only the `completion_tokens` integer of each cumulative chunk is read, the small
`meta_info` object decoded once at the end, never the growing text: the client stays cheap per token.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from . import repetition
from .metrics import RequestRecord

_META_INFO_KEY = b'"meta_info"'
_COMPLETION_TOKENS_KEY = b'"completion_tokens":'
# The integer after `"completion_tokens":`; a float or anything else leaves it to the full decode.
_INT_VALUE = re.compile(rb"[ \t\r\n]*([0-9]+)[ \t\r\n]*[,}]")
_JSON_DECODER = json.JSONDecoder()


class StreamError(Exception):
    """The server reported an error inside an otherwise successful HTTP response."""


def _error_of(event: Any) -> str | None:
    """The message of an error event (`{"error": {...}}`, OpenAI `{"object": "error", ...}`), else None."""
    if not isinstance(event, dict):
        return None
    error = event.get("error")
    if error:
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    if event.get("object") == "error":
        return str(event.get("message") or event)
    return None


def _meta_info_of(line: bytes) -> dict[str, Any] | None:
    """Decode only the `"meta_info": {...}` object of a native chunk; None if it cannot be found that way.

    The cumulative text and output_ids grow with every chunk; decoding them each time would make a stream
    quadratic. `"meta_info"` followed by a quote cannot occur inside a JSON string (its quotes would be
    escaped), and SGLang puts the key last, so the search from the end is short.
    """
    at = line.rfind(_META_INFO_KEY)
    if at < 0:
        return None
    rest = line[at + len(_META_INFO_KEY) :].decode("utf-8", "replace").lstrip()
    if not rest.startswith(":"):
        return None
    try:
        meta_info, _ = _JSON_DECODER.raw_decode(rest[1:].lstrip())
    except ValueError:
        return None
    return meta_info if isinstance(meta_info, dict) else None


# The meta_info keys of a request's accepted-drafts histogram: 0.5.12+, and its older name (0.5.9 - 0.5.10).
_HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def _count_of(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _note_loop(record: RequestRecord, ids: list[int] | None, text: str | None) -> None:
    """Record where the output falls into a repetition loop: on its token ids when the server gave them, else on the
    words of its text."""
    units: list[Any]
    if ids:
        units, record.loop_unit = ids, "tokens"
    elif text:
        units, record.loop_unit = repetition.words(text), "words"
    else:
        return
    loop = repetition.find_loop(units)
    if loop is not None:
        record.loop_at, record.loop_period = loop.at, loop.period


def _histogram_of(fields: dict[str, Any]) -> list[int] | None:
    """The accepted-drafts histogram among a request's spec fields: a list of counts, else None."""
    for key in _HISTOGRAM_KEYS:
        value = fields.get(key)
        if isinstance(value, list) and value and all(_count_of(n) is not None for n in value):
            return value
    return None


class SglangStream:
    """Follows one native /generate stream, whose chunks are cumulative: the new tokens of a chunk are the
    growth of meta_info.completion_tokens."""

    split_itl = True

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.completion_tokens = 0
        # The latest meta_info: decoded already, or still the raw line it is in (decoded by finish only).
        self._last_meta_info: dict[str, Any] | None = None
        self._last_line: bytes | None = None
        self._last_offset = 0
        # The latest chunk, whole: its output_ids are decoded once at the end when the record keeps outputs.
        self._final: tuple[bytes, int] | None = None

    def feed(self, line: bytes, offset: int, now: float) -> None:
        self._final = (line, offset)
        # Fast path: `"meta_info":` then, inside it, `"completion_tokens":<int>`; only that integer is read.
        # Neither key followed by its quote and colon can occur inside a JSON string (the quotes would be
        # escaped), and SGLang puts meta_info last, so both searches from the end are short.
        at = line.rfind(_META_INFO_KEY)
        if at >= 0 and line.startswith(b":", at + 11):
            key_at = line.rfind(_COMPLETION_TOKENS_KEY, at)
            if key_at >= 0:
                match = _INT_VALUE.match(line, key_at + 20)
                if match is not None:
                    self._last_line = line
                    self._last_offset = offset
                    self._count(int(match.group(1)), now)
                    return
        meta_info = _meta_info_of(line)
        if meta_info is None:
            event = json.loads(line[offset:])
            message = _error_of(event)
            if message is not None:
                raise StreamError(message)
            meta_info = event.get("meta_info") if isinstance(event, dict) else None
            if not isinstance(meta_info, dict):
                return
        completion_tokens = meta_info.get("completion_tokens")
        if isinstance(completion_tokens, int) and not isinstance(completion_tokens, bool):
            self._count(completion_tokens, now)
        self._last_meta_info = meta_info
        self._last_line = None

    def _count(self, completion_tokens: int, now: float) -> None:
        if completion_tokens > self.completion_tokens:
            self.record.chunk_times.append(now)
            self.record.chunk_tokens.append(completion_tokens - self.completion_tokens)
            self.completion_tokens = completion_tokens

    @property
    def last_meta_info(self) -> dict[str, Any] | None:
        """The meta_info of the latest chunk that had one."""
        line = self._last_line
        if line is not None:
            meta_info = _meta_info_of(line)
            if meta_info is None:  # not decodable from the key on: decode the whole event (ValueError if bad)
                event = json.loads(line[self._last_offset :])
                meta_info = event.get("meta_info") if isinstance(event, dict) else None
                if not isinstance(meta_info, dict):
                    raise ValueError("meta_info is not an object")
            self._last_meta_info = meta_info
            self._last_line = None
        return self._last_meta_info

    def finish(self) -> None:
        meta_info = self.last_meta_info or {}
        finish_reason = meta_info.get("finish_reason")
        if isinstance(finish_reason, dict) and finish_reason.get("type") == "abort":
            raise StreamError(f"aborted: {finish_reason.get('message') or finish_reason}")
        self.record.output_len = self.completion_tokens
        verify_ct = meta_info.get("spec_verify_ct")
        if isinstance(verify_ct, int):
            self.record.spec_verify_ct = verify_ct
        self.record.spec_drafts_histogram = _histogram_of(meta_info)
        self.record.server_prompt_tokens = _count_of(meta_info.get("prompt_tokens"))
        # The final (cumulative) chunk is decoded whole once: the loop check reads its ids (or its text).
        if self._final is not None:
            line, offset = self._final
            event = json.loads(line[offset:])
            ids = event.get("output_ids") if isinstance(event, dict) else None
            if not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
                ids = None
            text = event.get("text") if isinstance(event, dict) else None
            _note_loop(self.record, ids, text if isinstance(text, str) else None)
            if self.record.keep_output and ids is not None:
                self.record.output_ids = ids


class OpenAICompletionStream:
    """Follows one /v1/completions stream, SGLang's or vLLM's: a chunk with new text (or token ids) is a chunk of
    output, its arrival the chunk's time; the token count comes from the usage chunk (`stream_options.include_usage`).

    A chunk's tokens are counted one per chunk, unless it carries its `token_ids` (vLLM 0.11+ with
    `return_token_ids`): SGLang sends a chunk per token, vLLM one per engine step, all the tokens accepted in it. The
    spec fields per request: SGLang's in `sglext.spec_tokens_details` of the chunk that finishes (asked for with
    `return_spec_tokens_details`; servers before 0.5.23 ignore the field and send none), vLLM's in
    `metrics.speculative_decoding` of the usage chunk (0.30+ with `--per-request-spec-decode-metrics`; reference
    vllm-interface §6): its `num_spec_steps` are the verify steps, its `acceptance_histogram` the accepted-drafts
    histogram, index j the steps that accepted exactly j drafts, as SGLang's."""

    split_itl = False

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.usage_completion_tokens: int | None = None
        self.spec_details: dict[str, Any] | None = None
        self.vllm_spec: dict[str, Any] | None = None
        self.usage_prompt_tokens: int | None = None
        self.token_ids: list[int] = []
        # The text pieces, joined once at the end for the loop check when no token ids came.
        self.text_pieces: list[str] = []

    def feed(self, line: bytes, offset: int, now: float) -> None:
        event = json.loads(line[offset:])
        message = _error_of(event)
        if message is not None:
            raise StreamError(message)
        if not isinstance(event, dict):
            return
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            ids = choice.get("token_ids")
            if isinstance(ids, list) and ids:
                self.record.chunk_times.append(now)
                self.record.chunk_tokens.append(len(ids))
                self.token_ids.extend(ids)
                break
            text = choice.get("text")
            if text:
                self.record.chunk_times.append(now)
                self.record.chunk_tokens.append(1)
                if isinstance(text, str):
                    self.text_pieces.append(text)
                break
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_completion_tokens = usage["completion_tokens"]
        if isinstance(usage, dict):
            self.usage_prompt_tokens = _count_of(usage.get("prompt_tokens")) or self.usage_prompt_tokens
        sglext = event.get("sglext")
        if isinstance(sglext, dict) and isinstance(sglext.get("spec_tokens_details"), dict):
            self.spec_details = sglext["spec_tokens_details"]
        metrics = event.get("metrics")
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            self.vllm_spec = metrics["speculative_decoding"]

    def finish(self) -> None:
        if self.usage_completion_tokens is not None:
            self.record.output_len = self.usage_completion_tokens
        else:
            # A server that ignores include_usage: the chunks' token ids, else one token per text chunk, is the best
            # remaining guess.
            self.record.output_len = sum(self.record.chunk_tokens)
        if self.spec_details is not None:
            self.record.spec_verify_ct = _count_of(self.spec_details.get("spec_verify_ct"))
            self.record.spec_drafts_histogram = _histogram_of(self.spec_details)
        if self.vllm_spec is not None:
            self.record.spec_verify_ct = _count_of(self.vllm_spec.get("num_spec_steps"))
            histogram = self.vllm_spec.get("acceptance_histogram")
            self.record.spec_drafts_histogram = _histogram_of({_HISTOGRAM_KEYS[0]: histogram})
        self.record.server_prompt_tokens = self.usage_prompt_tokens
        ids = [t for t in self.token_ids if isinstance(t, int)] if self.token_ids else None
        _note_loop(self.record, ids, "".join(self.text_pieces))
        if self.record.keep_output and self.token_ids:
            self.record.output_ids = self.token_ids


Stream = SglangStream | OpenAICompletionStream


def feed_sse(stream: Stream, lines: list[bytes], now: float) -> bool:
    """Hand the JSON `data:` lines among lines to stream; True once `data: [DONE]` has been seen.

    The line is passed whole with the offset of its JSON: slicing off `data: ` would copy the growing
    cumulative chunk once more for nothing.
    """
    for line in lines:
        if line.startswith(b"data: {"):
            stream.feed(line, 6, now)
        elif line.startswith(b"data:{"):
            stream.feed(line, 5, now)
        elif line.startswith(b"data:") and line[5:].strip() == b"[DONE]":
            return True
        # Anything else is a blank separator, a ":" comment or an event:/id: field.
    return False


class SseLineSplitter:
    """Turns the pieces a socket delivers into whole lines, keeping a partial last line for the next piece."""

    def __init__(self) -> None:
        self._partial = b""

    def split(self, piece: bytes) -> list[bytes]:
        if self._partial:
            piece = self._partial + piece
        lines = piece.split(b"\n")
        self._partial = lines.pop()
        return lines

    def rest(self) -> list[bytes]:
        partial, self._partial = self._partial, b""
        return [partial] if partial else []


class SseReceiver:
    """The body sink of one streaming request: splits the pieces into lines, feeds the stream, and notes the
    time of `data: [DONE]` as the request's end. Pieces after [DONE] are ignored (the transport still reads
    the body to its end so the connection can be reused)."""

    __slots__ = ("done", "partial", "record", "stream")

    def __init__(self, stream: Stream, record: RequestRecord) -> None:
        self.stream = stream
        self.record = record
        self.partial = b""
        self.done = False

    def __call__(self, piece: bytes, now: float) -> None:
        if self.done:
            return
        if self.partial:
            piece = self.partial + piece
        lines = piece.split(b"\n")
        self.partial = lines.pop()
        if feed_sse(self.stream, lines, now):
            self.done = True
            self.record.end = now

    def end_of_body(self) -> None:
        """The body ended; a server that closed the stream without [DONE] still ends the request there."""
        if not self.done:
            self.record.end = time.perf_counter()
            partial, self.partial = self.partial, b""
            if partial:
                feed_sse(self.stream, [partial], self.record.end)
        self.stream.finish()
        if not self.record.chunk_times:
            raise StreamError("the stream ended without any output tokens")
