"""What a benchmark's workload does to a server (pure): prompts that repeat themselves, outputs that fall into a
repetition loop, and a speculative server that applies another prompt template. The faults `output_loop`,
`output_loop_speculative` and `template_mismatch` (simhost/knobs.py) are decided here, per request, from the prompt,
so both arms of a comparison loop on the same prompts.

Facts behind the numbers (issue #52, from public reports): a repetition loop was "the fastest arm" at 7.76 tokens
per verify against 2.68 for the healthy one (a draft predicts a loop almost perfectly); acceptance was 99% on
repeated filler prompts and 88% on natural text; two harnesses differed by their prompt templates. The shapes of
the curves below are the simulator's guesses, not measurements.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from simhost import knobs

# Per-token acceptance while an output loops: the draft has seen the loop and predicts it. 0.993 gives an accept
# length of 7.8 at 7 steps (sum of 0.993**i, i = 0..7), the reported 7.76. A guess fitted to that one report.
LOOP_ACCEPT_P = 0.993
# Per-token acceptance on a prompt made of repeated filler: the reported 99%.
REPEAT_ACCEPT_P = 0.99
# n-gram length of the repetitiveness measure.
NGRAM = 4
# How repetitiveness (share of repeated 4-grams) maps to "how far acceptance moves towards REPEAT_ACCEPT_P": 0 up
# to the floor (natural text repeats a few 4-grams and must keep today's acceptance; random ids repeat none), linear
# up to the ceiling, where a prompt of repeated filler sits. NGRAM finds its drafts in the prompt and output itself,
# so it feels repetition from a lower floor (strongly). Guesses.
REPEAT_FLOOR = 0.2
NGRAM_REPEAT_FLOOR = 0.05
REPEAT_CEILING = 0.85
REPEAT_WINDOW = 8192
# Ids of the candidate's own prompt template (a different chat template's extra tokens): a fixed, harmless list.
TEMPLATE_SEED = 0x7E3A11


def repetitiveness(ids: list[int]) -> float:
    """The share of the prompt's token 4-grams that occur earlier in it: 0 for random ids (and for a prompt shorter
    than 5 tokens), near 1 for one sentence repeated. Read over the first REPEAT_WINDOW tokens (a bound on work per
    request; filler shows within them)."""
    ids = ids[:REPEAT_WINDOW]
    total = len(ids) - NGRAM + 1
    if total < 2:
        return 0.0
    seen: set[tuple[int, ...]] = set()
    repeated = 0
    for i in range(total):
        gram = tuple(ids[i : i + NGRAM])
        if gram in seen:
            repeated += 1
        else:
            seen.add(gram)
    return repeated / total


def repeat_weight(share: float, algorithm: str | None) -> float:
    """0..1: how far a prompt with `share` repeated 4-grams moves acceptance towards REPEAT_ACCEPT_P; exactly 0 at
    and below the floor, so random ids and natural text keep their acceptance to the last bit."""
    floor = NGRAM_REPEAT_FLOOR if algorithm == "NGRAM" else REPEAT_FLOOR
    if share <= floor:
        return 0.0
    return min(1.0, (share - floor) / (REPEAT_CEILING - floor))


def repeat_p(p: float, weight: float) -> float:
    """The per-token acceptance of a request whose prompt has repeat weight `weight`: `p` itself at 0."""
    if weight <= 0:
        return p
    return p + (max(p, REPEAT_ACCEPT_P) - p) * weight


@dataclass(frozen=True)
class WorkloadFaults:
    """The workload faults of one server and their knobs."""

    loop: bool = False  # output_loop, or output_loop_speculative on a speculative server
    loop_share: float = 0.5
    loop_after: int = 40
    loop_period: int = 4
    template_extra: int = 0  # template_mismatch on a speculative server: extra prompt tokens

    @classmethod
    def for_server(
        cls, faults: frozenset[str], speculative: bool, env: Mapping[str, str] | None = None
    ) -> WorkloadFaults:
        loop = "output_loop" in faults or ("output_loop_speculative" in faults and speculative)
        extra = int(knobs.get_float("SIMHOST_TEMPLATE_EXTRA_TOKENS", env)) if speculative else 0
        return cls(
            loop=loop,
            loop_share=min(1.0, max(0.0, knobs.get_float("SIMHOST_LOOP_SHARE", env))),
            loop_after=max(1, int(knobs.get_float("SIMHOST_LOOP_AFTER_TOKENS", env))),
            loop_period=max(1, int(knobs.get_float("SIMHOST_LOOP_PERIOD", env))),
            template_extra=max(0, extra) if "template_mismatch" in faults else 0,
        )

    def loops(self, ids: list[int]) -> bool:
        """Whether this prompt's output loops: a share of prompts chosen by a hash of the prompt (the same prompts on
        every server and every run)."""
        if not self.loop:
            return False
        digest = zlib.crc32(b"loop:" + ",".join(map(str, ids[:256])).encode() + str(len(ids)).encode())
        return digest / 0xFFFFFFFF < self.loop_share

    def template_ids(self, vocab: int) -> list[int]:
        return [(TEMPLATE_SEED + 7919 * i) % vocab for i in range(self.template_extra)]


def loop_source(position: int, after: int, period: int) -> int:
    """The output position whose token a looping output repeats at `position`: itself before the loop starts, then
    the last `period` tokens before `after` over and over."""
    if after < 0 or position < after:
        return position
    period = min(period, after)
    return after - period + (position - after) % period
