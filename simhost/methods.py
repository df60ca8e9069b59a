"""Each speculative method's personality in the speed and acceptance models (pure), shared by both engines.

A method is what the server really runs, which is not always the algorithm's name: SGLang rewrites NEXTN to EAGLE,
and an EAGLE server whose draft is the target's own checkpoint (`--speculative-draft-model-path` = the model, or
none on an MTP architecture) runs the target's MTP heads; vLLM's `mtp` is the same method. `method_of` decides.

Per method (the numbers marked "guess" are the simulator's, where the references are silent):
- EAGLE / EAGLE3: as before this module existed: every position accepts with the same p (SIMHOST_ACCEPT_P), a
  draft step of 1.5 ms, the tree-verify cost of `speed.forward_ms`.
- MTP: heads trained with the target: position 1 accepts ~0.88 (DeepSeek-V3's report: 85-90% for the second
  token), then falls fast (x0.8 a position; guess); a step runs one MoE layer of the target (2.5 ms; guess).
- STANDALONE: a small full LM: per-position acceptance flatter than heads (x0.99; guess) at SIMHOST_ACCEPT_P, a
  4 ms step (its own layers and KV cache).
- NGRAM: no draft model: a 0.2 ms trie lookup; acceptance SIMHOST_NGRAM_ACCEPT_P, falling x0.9 a position (guess),
  and, more than any other method, moved by how repetitive the text is (simhost/workload.py). Up to
  num_draft_tokens - 1 drafts are accepted (the trie's paths), whatever num_steps says.
- DFLASH: a block-diffusion drafter: one draft forward drafts a whole block (num_draft_tokens = block size, the
  first being the anchor), and the target verifies the block as one causal chunk (no tree mask, so not the
  tree-verify path's kernel jump): batch-1 cost 12 ms + 0.8 ms a token (guess), plus the usual 0.6 ms per token
  per extra request, so its verify cost grows with batch x block. High acceptance (0.93, x0.97 a position; guess):
  ~2.5x the baseline at one request (the issue's report), slower than MTP at 16.
- DSPARK: a block drafter whose confidence decides how much of the block is verified (the cap length): a draft
  forward of 6 ms (guess), drafts accepted at 0.85 (x0.98; guess), and the verify covers the cap (the run of
  drafts it is confident in, one past the correct run, once the batch's blocks exceed a verify budget; the whole
  block below it or at threshold 0) plus the bonus token.
  Whole blocks past the tree-verify jump cost more than their extra acceptance earns at few requests (4-8%
  slower than EAGLE-3 at <= 8), and the capped verify saves compute where the batch is large (5-20% faster at
  >= 12): the issue's reports, reproduced by these guesses.
"""

from __future__ import annotations

from dataclasses import dataclass

# The methods by the name the speed model knows them by.
EAGLE_METHODS = ("EAGLE", "EAGLE3")
BLOCK_METHODS = ("DFLASH", "DSPARK")
ALL = ("EAGLE", "EAGLE3", "MTP", "STANDALONE", "NGRAM", "DFLASH", "DSPARK")


@dataclass(frozen=True)
class Personality:
    draft_step_ms: float  # one draft forward at batch 1
    draft_per_req_ms: float = 0.05  # each extra request in the batch, per draft forward
    base_p: float | None = None  # per-token acceptance at position 1; None: the server's knob
    decay: float = 1.0  # each later position accepts with the previous one's p times this
    one_forward: bool = False  # a block drafter: one draft forward per iteration, whatever num_steps says
    block_verify: bool = False  # the verify is one causal chunk (DFLASH), not the tree-verify path
    drafts_from_tokens: bool = False  # up to num_draft_tokens - 1 drafts accepted, not min(steps, ...)


PERSONALITIES: dict[str, Personality] = {
    "EAGLE": Personality(1.5),
    "EAGLE3": Personality(1.5),
    "MTP": Personality(2.5, base_p=0.88, decay=0.8),
    "STANDALONE": Personality(4.0, decay=0.99),
    "NGRAM": Personality(0.2, draft_per_req_ms=0.01, decay=0.9, drafts_from_tokens=True),
    "DFLASH": Personality(
        5.0, draft_per_req_ms=0.2, base_p=0.93, decay=0.97, one_forward=True, block_verify=True, drafts_from_tokens=True
    ),
    "DSPARK": Personality(6.0, draft_per_req_ms=0.02, base_p=0.85, decay=0.98, one_forward=True),
}
# DFLASH's causal block verify at batch 1: the decode step plus this much per token of the block (guess).
BLOCK_VERIFY_MS_PER_TOKEN = 0.8


def method_of(algorithm: str | None, draft_path: str | None, model_path: str | None) -> str | None:
    """The method a server runs: MTP for EAGLE on the target's own checkpoint, else the algorithm."""
    if algorithm == "EAGLE" and (draft_path is None or draft_path == model_path):
        return "MTP"
    return algorithm


def personality(method: str | None) -> Personality:
    return PERSONALITIES.get(method or "EAGLE3", PERSONALITIES["EAGLE3"])


def position_p(p: float, decay: float, position: int) -> float:
    """Acceptance of the draft at 0-based `position` given the run so far: p, p x decay, ... (p itself at decay 1,
    bit for bit, so EAGLE's draws are what they always were)."""
    return p * decay**position


def dspark_drafts(num_draft_tokens: int) -> int:
    """DSpark drafts a block of `num_draft_tokens` (its block size) and verifies at most that plus the bonus."""
    return num_draft_tokens


# DSpark's verify budget in tokens per batch: while the whole batch's blocks fit, every block is verified whole;
# beyond it each request verifies its confident prefix only. A guess at the mechanism behind the reported flip
# (slower than EAGLE-3 at <= 8 concurrent requests, faster at >= 12): 48 = 8 requests x (block 5 + bonus).
DSPARK_VERIFY_BUDGET = 48


def full_block(block: int, threshold: float, bs: int) -> bool:
    """Whether a DSpark batch verifies whole blocks: at threshold 0 ("verify the full block"), or within budget."""
    return threshold <= 0 or bs * (block + 1) <= DSPARK_VERIFY_BUDGET


def dspark_cap(accepted: int, block: int, threshold: float, bs: int) -> int:
    """The drafts a DSpark verify covers (its cap length): the whole block, or the confident prefix, modelled as
    one past the correct run (the first wrong draft is the one its confidence could not rule out; guess)."""
    if full_block(block, threshold, bs):
        return block
    return min(block, accepted + 1)


def expected_dspark_cap(p: float, decay: float, block: int, threshold: float, bs: int) -> float:
    """Mean cap length over the run distribution of a request accepting with p (x decay a position)."""
    if full_block(block, threshold, bs):
        return float(block)
    mean, alive = 0.0, 1.0
    for k in range(block + 1):
        stop = 1.0 - position_p(p, decay, k) if k < block else 1.0
        mean += alive * stop * min(block, k + 1)
        alive *= 1.0 - stop
    return mean
