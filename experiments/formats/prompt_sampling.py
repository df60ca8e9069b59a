"""Prompt sets as data (pure): reading an upload or the ShareGPT file, and drawing a profile's sample.

A prompt set is a list of conversations, each a list of turns (user first, then alternating) with an optional
category. A benchmark request sends the first turn as the prompt and takes the second, when there is one, as the
reference completion whose length is the request's output length (capped by the profile), as SGLang's
bench_serving does for ShareGPT: conversations of fewer than two turns are dropped for ShareGPT, the list is
shuffled with the seed (Python's `random`, the same permutation as bench_serving's `random.seed(seed)` then
`random.shuffle`), then walked in that order, skipping prompts or completions shorter than 2 tokens and prompts
longer than the input cap, until the sample holds the requested count.

Token counts are whitespace-separated words: the tokenizer simhost and its shipped tokenizer
(`simhost/models/kimi-k2.5-sim/tokenizer`) agree on.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

# An upload is untrusted: bounded in bytes, conversations, turns and characters per turn.
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
MAX_PROMPTS = 50_000
MAX_TURNS = 64
MAX_TURN_CHARS = 100_000
MAX_CATEGORY_CHARS = 40
# bench_serving's pruning of too short sequences.
MIN_TOKENS = 2
DEFAULT_CATEGORY = "general"
# A JSON "\ud800" escape decodes to a lone surrogate: not text (no UTF-8 encodes it), so a page showing it fails.
_SURROGATE = re.compile("[\ud800-\udfff]")
# What json.loads raises besides a syntax error: nesting deeper than the interpreter's recursion limit, and an
# integer longer than Python's 4,300-digit conversion limit.
_UNREADABLE = (RecursionError, ValueError)
_ROLE_KEYS = ("from", "role")
_TEXT_KEYS = ("value", "content")


class PromptSetError(ValueError):
    """An upload that is not a prompt set; the message names the line (JSONL) or item (JSON) and the field."""


@dataclass(frozen=True, slots=True)
class Conversation:
    turns: tuple[str, ...]
    category: str = DEFAULT_CATEGORY


@dataclass(frozen=True, slots=True)
class SampledPrompt:
    index: int  # the conversation's position in its set
    text: str
    category: str
    input_len: int
    output_len: int

    def as_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "text": self.text,
            "category": self.category,
            "input_len": self.input_len,
            "output_len": self.output_len,
        }


def count_tokens(text: str) -> int:
    return len(text.split())


# ---- uploads ---------------------------------------------------------------------------------------------------


def parse_upload(data: bytes) -> list[Conversation]:
    """The conversations of an uploaded JSONL or JSON file. Each item is `{"prompt": str}` or `{"conversations":
    [{"from"|"role": ..., "value"|"content": str}, ...]}` (ShareGPT's or the chat format), with an optional
    `"category"`. PromptSetError for anything else, naming where."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise PromptSetError(f"The file is {len(data)} bytes; at most {MAX_UPLOAD_BYTES} are accepted.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PromptSetError(f"The file is not UTF-8 text (byte {exc.start}).") from exc
    stripped = text.lstrip()
    if not stripped:
        raise PromptSetError("The file is empty.")
    items: list[tuple[str, object]] = []
    if stripped.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PromptSetError(f"Not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.") from exc
        except _UNREADABLE as exc:
            raise PromptSetError(f"Not a prompt file: {_unreadable(exc)}.") from exc
        if not isinstance(parsed, list):
            raise PromptSetError("A JSON file must hold a list of prompts.")
        items = [(f"item {i + 1}", item) for i, item in enumerate(parsed)]
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append((f"line {number}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise PromptSetError(f"line {number}: not valid JSON ({exc.msg}, column {exc.colno}).") from exc
            except _UNREADABLE as exc:
                raise PromptSetError(f"line {number}: {_unreadable(exc)}.") from exc
            if len(items) > MAX_PROMPTS:
                break
    if not items:
        raise PromptSetError("The file holds no prompts.")
    if len(items) > MAX_PROMPTS:
        raise PromptSetError(f"The file holds more than {MAX_PROMPTS} prompts.")
    return [_conversation(where, item) for where, item in items]


def _unreadable(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "its JSON is nested too deeply"
    return "it holds a number too long to read (over 4,300 digits)"


def _conversation(where: str, item: object) -> Conversation:
    if not isinstance(item, dict):
        raise PromptSetError(f'{where}: expected an object with "prompt" or "conversations".')
    category = item.get("category", DEFAULT_CATEGORY)
    if not isinstance(category, str) or not category.strip() or len(category) > MAX_CATEGORY_CHARS:
        raise PromptSetError(f'{where}: "category" must be a non-empty string of at most {MAX_CATEGORY_CHARS} chars.')
    if _SURROGATE.search(category):
        raise PromptSetError(f'{where}: "category" holds a lone surrogate (\\ud800-\\udfff), not text.')
    if "prompt" in item:
        turns: list[object] = [item["prompt"]]
        field = "prompt"
    elif "conversations" in item or "messages" in item:
        field = "conversations" if "conversations" in item else "messages"
        raw = item[field]
        if not isinstance(raw, list) or not raw:
            raise PromptSetError(f'{where}: "{field}" must be a non-empty list of turns.')
        if len(raw) > MAX_TURNS:
            raise PromptSetError(f'{where}: "{field}" has {len(raw)} turns; at most {MAX_TURNS}.')
        turns = [_turn_text(f"{where}, {field}[{i}]", turn) for i, turn in enumerate(raw)]
    else:
        raise PromptSetError(f'{where}: expected an object with "prompt" or "conversations".')
    for i, turn in enumerate(turns):
        label = field if field == "prompt" else f"{field}[{i}]"
        if not isinstance(turn, str) or not turn.strip():
            raise PromptSetError(f'{where}: "{label}" must be non-empty text.')
        if len(turn) > MAX_TURN_CHARS:
            raise PromptSetError(f'{where}: "{label}" has {len(turn)} characters; at most {MAX_TURN_CHARS}.')
        if "\x00" in turn:
            raise PromptSetError(f'{where}: "{label}" contains a NUL character.')
        if _SURROGATE.search(turn):
            raise PromptSetError(f'{where}: "{label}" holds a lone surrogate (\\ud800-\\udfff), not text.')
    return Conversation(tuple(str(t) for t in turns), category.strip())


def _turn_text(where: str, turn: object) -> object:
    if isinstance(turn, str):
        return turn
    if isinstance(turn, dict):
        for key in _TEXT_KEYS:
            if key in turn:
                return turn[key]
    raise PromptSetError(f'{where}: a turn is text or an object with "value" or "content".')


def conversations_json(conversations: list[Conversation]) -> list[dict[str, object]]:
    return [{"turns": list(c.turns), "category": c.category} for c in conversations]


def conversations_from_json(stored: list[dict[str, object]]) -> list[Conversation]:
    return [Conversation(tuple(c["turns"]), str(c["category"])) for c in stored]  # type: ignore[arg-type]


def content_hash(conversations: list[Conversation]) -> str:
    canonical = json.dumps(conversations_json(conversations), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# ---- ShareGPT --------------------------------------------------------------------------------------------------


def sharegpt_bytes(conversations: list[Conversation]) -> bytes:
    """The conversations' first two turns as a whole ShareGPT JSON list, in order: what `bench_serving --dataset-name
    sharegpt` reads with json.load (which the packaged file, cut off mid-record, defeats), so its seeded shuffle
    draws from the very conversations specdash read."""
    records = [
        {"id": str(i), "conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]}
        for i, (prompt, answer) in enumerate(c.turns[:2] for c in conversations)
    ]
    return json.dumps(records).encode()


def read_sharegpt(text: str) -> tuple[list[Conversation], bool]:
    """The first two turns of every conversation of at least two turns in ShareGPT's JSON list, and whether the
    list ended early (a truncated file): decoded record by record, so a file cut off mid-record still yields every
    record before the cut. Records are categorised by `categorize` (ShareGPT has no categories of its own)."""
    decoder = json.JSONDecoder()
    at = text.find("[") + 1
    if at == 0:
        raise PromptSetError("The ShareGPT file does not hold a JSON list.")
    out: list[Conversation] = []
    length = len(text)
    for record, _end in _records(decoder, text, at, length):
        if record is None:
            return out, True
        turns = record.get("conversations") if isinstance(record, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = (t.get("value") if isinstance(t, dict) else None for t in turns[:2])
        if isinstance(first, str) and isinstance(second, str):
            out.append(Conversation((first, second), categorize(first)))
    return out, False


def _records(decoder: json.JSONDecoder, text: str, at: int, length: int) -> Iterator[tuple[object, int]]:
    """Each record of a JSON list from `at` (just after its `[`); (None, at) where it breaks off."""
    whitespace = " \t\r\n,"
    while True:
        while at < length and text[at] in whitespace:
            at += 1
        if at >= length:
            yield None, at
            return
        if text[at] == "]":
            return
        try:
            record, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            yield None, at
            return
        yield record, at


_CODE_MARKS = ("```", "def ", "function ", "class ", "import ", "#include", "SELECT ", "public static", "console.")
_MATH_MARKS = ("solve", "equation", "integral", "derivative", "calculate", "probability", "prove that", "theorem")


def categorize(prompt: str) -> str:
    """A coarse category of a prompt without one: code, math or chat, by what the text contains."""
    head = prompt[:2000]
    if any(mark in head for mark in _CODE_MARKS):
        return "code"
    lowered = head.lower()
    if any(mark in lowered for mark in _MATH_MARKS):
        return "math"
    return "chat"


# ---- sampling --------------------------------------------------------------------------------------------------


def sample(
    conversations: list[Conversation], count: int, seed: int, input_cap: int, output_cap: int
) -> list[SampledPrompt]:
    """`count` prompts drawn with `seed` (module docstring); fewer when the set has fewer that fit the caps."""
    order = list(range(len(conversations)))
    random.Random(seed).shuffle(order)
    out: list[SampledPrompt] = []
    for index in order:
        if len(out) == count:
            break
        conversation = conversations[index]
        prompt = conversation.turns[0]
        input_len = count_tokens(prompt)
        if input_len < MIN_TOKENS or input_len > input_cap:
            continue
        if len(conversation.turns) > 1:
            reference = count_tokens(conversation.turns[1])
            if reference < MIN_TOKENS:
                continue
            output_len = min(reference, output_cap)
        else:
            output_len = output_cap
        out.append(SampledPrompt(index, prompt, conversation.category, input_len, max(output_len, MIN_TOKENS)))
    return out


def sample_bytes(prompts: list[SampledPrompt]) -> bytes:
    """The file the benchmark client reads: one JSON object per line, in sending order."""
    return b"".join(json.dumps(p.as_json(), ensure_ascii=False).encode() + b"\n" for p in prompts)


def sample_hash(data: bytes) -> str:
    """The name of a sample on a host: the digest of its file, so a sample travels once per version."""
    return hashlib.sha256(data).hexdigest()[:20]
