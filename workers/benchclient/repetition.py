"""What the degenerate-benchmark checks (experiments/analysis/degenerate.py) need of each request, measured on the
host so that no output has to travel: where the output falls into a repetition loop, and how repetitive, and which,
the prompt was.

Pure and stdlib-only. A loop is a periodic tail: from some position on, every token equals the one `period` tokens
before it, to the end of the output (greedy decoding that has looped never leaves the loop: its context keeps feeding
it the same tokens). Periods of 1 to MAX_PERIOD tokens; the tail must cover MIN_REPEATS periods and MIN_LOOP_TOKENS
tokens, so a healthy output essentially never matches: for natural text, whose most frequent word has a probability
near 0.06, a chance repeat of even 20 tokens in a row at a given period has a probability far below 1e-12.
These bounds are our own choice (no engine or harness states one); the false-positive rate over simulated healthy
runs is measured in workers/tests/test_degenerate_benchmarks.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

MAX_PERIOD = 32
MIN_REPEATS = 3
MIN_LOOP_TOKENS = 24
# The n of the n-grams whose repeats within a prompt measure how repetitive (filler) it is, read over its first
# REPEAT_WINDOW units: a bound on the work per prompt before the clock starts (filler shows within them).
NGRAM = 4
REPEAT_WINDOW = 8192


@dataclass(frozen=True, slots=True)
class Loop:
    # The first position that repeats the token `period` before it, through to the end: the output has looped
    # after `at` tokens (a loop of the 4 tokens before token 40, repeated from 40 on, is at 40).
    at: int
    period: int


def find_loop(tokens: Sequence[object]) -> Loop | None:
    """The loop of the earliest-starting periodic tail of `tokens` (period 1..MAX_PERIOD) covering at least
    MIN_REPEATS periods and MIN_LOOP_TOKENS tokens; None when there is none. Among periods whose tails start at the
    same position the smallest wins (a period-4 loop is also periodic at 8)."""
    n = len(tokens)
    best: Loop | None = None
    for period in range(1, min(MAX_PERIOD, n // MIN_REPEATS) + 1):
        # Count back from the end how many tokens equal the one a period before them.
        matched = 0
        i = n - 1
        while i >= period and tokens[i] == tokens[i - period]:
            matched += 1
            i -= 1
        tail = matched + period
        if tail < max(MIN_LOOP_TOKENS, MIN_REPEATS * period):
            continue
        at = n - matched
        if best is None or at - period < best.at - best.period:
            best = Loop(at, period)
    return best


def words(text: str) -> list[str]:
    """A text output as the loop check reads it when the server gives no token ids: its whitespace-split words."""
    return text.split()


def prompt_digest(prompt: Sequence[int] | str) -> str:
    """A short digest of the prompt as sent (its token ids, or its text): equal digests, the same prompt."""
    data = prompt.encode() if isinstance(prompt, str) else ",".join(map(str, prompt)).encode()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def repeat_share(prompt: Sequence[int] | str) -> float | None:
    """The share of the prompt's NGRAM-grams (of token ids, or of words of a text) already seen earlier in it: about 0
    for natural text and random ids, near 1 for a phrase pasted over and over. None for a prompt too short to say
    (fewer than 2 * NGRAM units)."""
    units: Sequence[object] = (words(prompt) if isinstance(prompt, str) else prompt)[:REPEAT_WINDOW]
    total = len(units) - NGRAM + 1
    if len(units) < 2 * NGRAM:
        return None
    seen: set[tuple[object, ...]] = set()
    repeated = 0
    for i in range(total):
        gram = tuple(units[i : i + NGRAM])
        if gram in seen:
            repeated += 1
        else:
            seen.add(gram)
    return round(repeated / total, 4)
