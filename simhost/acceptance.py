"""How a prompt moves the draft's acceptance (pure): EAGLE-3 drafts accept more on predictable text (code, worked
math) than on open conversation, and every text has its own level. The engine multiplies a request's acceptance
probability by `prompt_factor`; prompts sent as token ids (the random-ids profile) keep factor 1.

Also where a speculative server's output stops being the baseline's: the `draft_bug` fault's rule, and the long
tail of floating-point non-determinism (`SIMHOST_NONDETERMINISM`): a real server's batch composition changes the
order of its reductions, a near-tie flips now and then, and from that token on the text differs. Late, and for a
few prompts only, which is what the equivalence gate must report without failing a candidate for it."""

from __future__ import annotations

import zlib

# Per category, what real EAGLE-3 reports show in spirit: code accepts most, chat least.
CATEGORY_FACTORS = {"code": 1.2, "math": 1.1, "chat": 0.9}
# The text's own level: a deterministic spread of +-SPREAD around the category's factor.
SPREAD = 0.1
_CODE_MARKS = ("```", "def ", "function ", "class ", "import ", "#include", "SELECT ", "public static", "console.")
_MATH_MARKS = ("solve", "equation", "integral", "derivative", "calculate", "probability", "prove that", "theorem")


def category(text: str) -> str:
    head = text[:2000]
    if any(mark in head for mark in _CODE_MARKS):
        return "code"
    lowered = head.lower()
    if any(mark in lowered for mark in _MATH_MARKS):
        return "math"
    return "chat"


def prompt_factor(text: str | None) -> float:
    """The multiplier on a request's acceptance probability for a prompt sent as text; 1.0 for token ids."""
    if text is None:
        return 1.0
    level = zlib.crc32(text.encode("utf-8", "replace")) / 0xFFFFFFFF  # 0..1, the same on every run
    return CATEGORY_FACTORS[category(text)] * (1 - SPREAD + 2 * SPREAD * level)


def draft_bug_token(position: int, token: int, diverge_at: int, vocab: int) -> int:
    """The token a buggy draft path emits at `position`: the right one before `diverge_at`, another after."""
    return token if diverge_at < 0 or position < diverge_at else (token + 1) % vocab


# Where a non-deterministic flip may land: after the gate's default window of 32 tokens.
FLIP_FROM, FLIP_SPAN = 40, 88


def late_flip(ids: list[int], share: float) -> int:
    """The output position where this prompt's text flips, for `share` of prompts (by a hash of the prompt: the
    same prompts every run); -1 for the others."""
    digest = zlib.crc32(",".join(map(str, ids[:64])).encode() + str(len(ids)).encode())
    if digest / 0xFFFFFFFF >= share:
        return -1
    return FLIP_FROM + digest % FLIP_SPAN
