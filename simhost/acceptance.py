"""How a prompt moves the draft's acceptance (pure): EAGLE-3 drafts accept more on predictable text (code, worked
math) than on open conversation, and every text has its own level. The engine multiplies a request's acceptance
probability by `prompt_factor`; prompts sent as token ids (the random-ids profile) keep factor 1.

Also where a speculative server's output stops being the baseline's: the `draft_bug` fault's rule, and the long
tail of floating-point non-determinism (`SIMHOST_NONDETERMINISM`): a real server's batch composition changes the
order of its reductions, a near-tie flips now and then, and from that token on the text differs. Late, and for a
few prompts only, which is what the equivalence gate must report without failing a candidate for it.

And the draft that accepts nothing: an EAGLE3 checkpoint served with `--speculative-algorithm EAGLE` (or NEXTN,
which SGLang rewrites to EAGLE). Likely because the EAGLE path feeds the draft the target's last hidden state where
an EAGLE3 head expects three layers' worth; whatever the cause, every draft token is rejected: accept length exactly
1.0, with no error and no warning (what users report in SGLang's issues)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

# Per category, what real EAGLE-3 reports show in spirit: code accepts most, chat least.
CATEGORY_FACTORS = {"code": 1.2, "math": 1.1, "chat": 0.9}
# The text's own level: a deterministic spread of +-SPREAD around the category's factor.
SPREAD = 0.1
# The simulator's own reading of a text, deliberately not the dashboard's category rule (so a per-category result
# is measured, not read back): text dense in syntax is code-like, text dense in digits and operators is worked
# math, and conversation is mostly letters and spaces.
_SYNTAX = frozenset("{}()[];=<>_#\\|&")
_MATH = frozenset("0123456789+-*/^=")
SYNTAX_SHARE, MATH_SHARE = 0.03, 0.1


def category(text: str) -> str:
    head = text[:2000]
    if not head:
        return "chat"
    if sum(c in _SYNTAX for c in head) >= SYNTAX_SHARE * len(head):
        return "code"
    if sum(c in _MATH for c in head) >= MATH_SHARE * len(head):
        return "math"
    return "chat"


def prompt_factor(text: str | None) -> float:
    """The multiplier on a request's acceptance probability for a prompt sent as text; 1.0 for token ids."""
    if text is None:
        return 1.0
    level = zlib.crc32(text.encode("utf-8", "replace")) / 0xFFFFFFFF  # 0..1, the same on every run
    return CATEGORY_FACTORS[category(text)] * (1 - SPREAD + 2 * SPREAD * level)


def accepts_nothing(algorithm: str | None, draft_config: Mapping[str, Any] | None) -> bool:
    """An EAGLE3 draft (by its config.json's architectures) served by the EAGLE algorithm: every draft rejected."""
    if algorithm != "EAGLE" or not draft_config:
        return False
    architectures = draft_config.get("architectures") or []
    return any("eagle3" in str(name).lower() for name in architectures)


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
