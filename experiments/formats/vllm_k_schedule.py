"""An adaptive schedule's bands as vLLM takes a K per batch size (pure): the `--speculative-config` key
`num_speculative_tokens_per_batch_size`, a list of `[start, end, K]` ranges (vLLM 0.33+, vllm-interface.md §1.2; what
`vllm bench sweep`'s `tune_speculative_k` writes).

Each band of the schedule (its lowest and highest concurrency, its winner's steps) is one range: a running batch of
`start` to `end` requests drafts `K` tokens. vLLM drafts a top-1 chain, so a band's winning steps are its K as they
are (SGLang's steps at topk 1). Guesses, said with the file: a band whose answer is no speculation gets the smallest
K, 1 (the reference does not say that vLLM takes K = 0 there); the ranges are widened to meet end to end (the bands
cover the concurrencies measured, a server sees every batch size), the first from 1 and the last to `max_batch`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KEY = "num_speculative_tokens_per_batch_size"
# The largest batch the last range reaches: vLLM's --max-num-seqs tops out in the thousands.
MAX_BATCH = 4096


@dataclass(frozen=True)
class VllmKSchedule:
    ranges: list[list[int]]
    notes: list[str] = field(default_factory=list)

    def speculative_config(self) -> dict[str, Any]:
        """What to merge into a vLLM config's `--speculative-config` JSON."""
        return {KEY: self.ranges}


def from_bands(bands: Sequence[Mapping[str, Any]], max_batch: int = MAX_BATCH) -> VllmKSchedule:
    """The ranges of `bands` ([{low, high, steps, config}], lowest first), each K its band's steps."""
    ordered = sorted(bands, key=lambda band: int(band["low"]))
    ranges: list[list[int]] = []
    notes: list[str] = []
    for i, band in enumerate(ordered):
        start = 1 if i == 0 else ranges[-1][1] + 1
        end = max_batch if i == len(ordered) - 1 else int(ordered[i + 1]["low"]) - 1
        steps = int(band.get("steps") or 0)
        if steps <= 0:
            notes.append(
                f"c={band['low']}-{band['high']}: no speculation won, and vLLM's K per batch size starts at 1 (a "
                "guess: the reference does not say it takes 0): written as K=1, the least drafting it takes."
            )
            steps = 1
        ranges.append([start, max(start, end), steps])
    return VllmKSchedule(ranges, notes)
