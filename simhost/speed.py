"""The speed model of the simulated GPU (pure: no I/O, no clock; the engine sleeps what this returns).

One batching loop serves every running request. A step costs:

- baseline decode: `forward(1 token per request, batch bs)`
- speculative iteration: `num_steps x draft_step(bs) + forward(num_draft_tokens per request, bs) (+ draft
  extend folded into the verify figure)`, then each request accepts a run of drafts (Bernoulli p each, at most
  min(num_steps, num_draft_tokens - 1)) plus one bonus token.
- `forward(n, bs) = verify_ms[n] + per_token_ms * n * (bs - 1)`: the batch-1 cost for n query tokens per
  request, growing with every extra token in the batch (MoE: more tokens touch more experts).
- `+ schedule_overhead_ms` when the overlap scheduler is off (always for spec v1), `x no_graph_factor`
  without CUDA graphs (disabled, or batch above --cuda-graph-max-bs).

The defaults are fitted so that 128 in / 128 out at concurrency 1 gives baseline ~83 tok/s, EAGLE3 2 steps
~94 tok/s, EAGLE3 3 steps ~60 tok/s (the verify cost jumps above 3 query tokens per request: the fitted data
show the attention kernel switching path there), and speculation's advantage shrinks with concurrency.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from simhost import methods


def _default_verify_ms() -> dict[int, float]:
    # Batch-1 forward cost by query tokens per request; n=1 is the plain decode step.
    return {1: 12.0, 2: 15.0, 3: 17.1, 4: 31.6, 5: 33.9, 6: 36.2, 7: 38.5, 8: 40.8}


# topk x draft tokens above which the target-verify graph capture runs out of memory (see fits_graph_memory).
GRAPH_TREE_LIMIT = 32


@dataclass(frozen=True)
class SpeedParams:
    verify_ms: dict[int, float] = field(default_factory=_default_verify_ms)
    verify_ms_per_extra_token: float = 2.3  # beyond the table
    per_token_ms: float = 0.6
    draft_step_ms: dict[str, float] = field(
        default_factory=lambda: {"EAGLE": 1.5, "EAGLE3": 1.5, "STANDALONE": 4.0, "NGRAM": 0.2}
    )
    draft_per_req_ms: float = 0.05
    schedule_overhead_ms: float = 1.0
    no_graph_factor: float = 1.6
    prefill_fixed_ms: float = 10.0
    prefill_per_token_ms: float = 0.05
    accept_p: float = 0.62
    ngram_accept_p: float = 0.3
    topk_gain: float = 0.35  # each extra top-k branch adds this much "effective tries" per position


@dataclass(frozen=True)
class SpecConfig:
    algorithm: str | None = None  # None = baseline
    num_steps: int = 0
    topk: int = 1
    num_draft_tokens: int = 1
    overlap: bool = True
    cuda_graph: bool = True
    cuda_graph_max_bs: int = 256
    # The method the server really runs (simhost/methods.py): MTP for EAGLE on the target's own heads; None: the
    # algorithm's name.
    method: str | None = None
    dspark_threshold: float = 0.5  # --speculative-dspark-confidence-threshold

    @property
    def kind(self) -> str | None:
        """The method's name in the speed and acceptance models (None for a baseline)."""
        if not self.algorithm:
            return None
        return self.method or self.algorithm

    @property
    def personality(self) -> methods.Personality:
        return methods.personality(self.kind)

    @property
    def is_tree(self) -> bool:
        """EAGLE-style drafting (steps x topk, tree verify); the others draft a chain, a block or a trie path."""
        return self.kind in ("EAGLE", "EAGLE3", "MTP", "STANDALONE")

    @classmethod
    def from_server_args(cls, args: object) -> SpecConfig:
        def get(name: str) -> Any:
            return getattr(args, name, None)

        algo = get("speculative_algorithm")
        method = methods.method_of(algo, get("speculative_draft_model_path"), get("model_path")) if algo else None
        threshold = get("speculative_dspark_confidence_threshold")
        graph_max = get("cuda_graph_max_bs") or get("cuda_graph_max_bs_decode")
        no_graph = (
            get("disable_cuda_graph")
            or get("disable_decode_cuda_graph")
            or get("cuda_graph_backend_decode") == "disabled"
        )
        return cls(
            algorithm=algo,
            num_steps=get("speculative_num_steps") or 0 if algo else 0,
            topk=get("speculative_eagle_topk") or 1 if algo else 1,
            num_draft_tokens=get("speculative_num_draft_tokens") or 1 if algo else 1,
            overlap=not get("disable_overlap_schedule"),
            cuda_graph=not no_graph,
            cuda_graph_max_bs=graph_max or 256,
            method=method if method != algo else None,
            dspark_threshold=0.5 if threshold is None else float(threshold),
        )

    @property
    def max_accepted_drafts(self) -> int:
        if not self.algorithm:
            return 0
        if self.kind == "DSPARK":
            return methods.dspark_drafts(self.num_draft_tokens)
        if self.personality.drafts_from_tokens:
            return max(self.num_draft_tokens - 1, 0)
        return min(self.num_steps, self.num_draft_tokens - 1)

    @property
    def branches(self) -> float:
        """The top-k branches the verify step really checks per depth: a tree of topk x steps candidates is cut to
        draft tokens - 1 of them, so topk 4 with 3 draft tokens at 2 steps checks one branch per depth (topk 1's
        gain) and pays the wider draft for nothing. Ties steps, topk and draft tokens together."""
        if not self.algorithm or self.topk <= 1 or self.num_steps < 1 or not self.is_tree:
            return 1.0
        return max(1.0, min(float(self.topk), (self.num_draft_tokens - 1) / self.num_steps))

    @property
    def fits_graph_memory(self) -> bool:
        """False where capturing the target-verify CUDA graphs runs out of memory: their buffers grow with
        topk x draft tokens per request (the tree mask and logits), past what an 8 x H200 kimi-k2.5 leaves free
        at the default --mem-fraction-static. Without CUDA graphs nothing is captured."""
        if not self.algorithm or not self.cuda_graph or not self.is_tree:
            return True
        return self.topk * self.num_draft_tokens <= GRAPH_TREE_LIMIT


def forward_ms(params: SpeedParams, tokens_per_req: int, bs: int) -> float:
    table = params.verify_ms
    top = max(table)
    base = table.get(tokens_per_req) or table[top] + params.verify_ms_per_extra_token * (tokens_per_req - top)
    return base + params.per_token_ms * tokens_per_req * (bs - 1)


def draft_step_ms(params: SpeedParams, cfg: SpecConfig, bs: int) -> float:
    """One draft forward at batch bs: EAGLE's (and STANDALONE's, NGRAM's) from SpeedParams, as always; the other
    methods' from their personality. A tree drafts topk branches per request."""
    kind = cfg.kind or "EAGLE3"
    pers = cfg.personality
    if kind in params.draft_step_ms and kind != "NGRAM":
        base, per_req = params.draft_step_ms[kind], params.draft_per_req_ms
    else:
        base, per_req = pers.draft_step_ms, pers.draft_per_req_ms
    return base + per_req * (bs - 1) * (cfg.topk if cfg.is_tree else 1)


def forward_tokens_ms(params: SpeedParams, tokens_per_req: float, bs: int) -> float:
    """forward_ms for a mean number of query tokens per request that need not be whole (a DSpark batch verifies
    each request's own cap): the batch-1 cost interpolated between the table's neighbours."""
    low = int(tokens_per_req)
    if low == tokens_per_req:
        return forward_ms(params, low, bs)
    frac = tokens_per_req - low
    base = (1 - frac) * forward_ms(params, low, 1) + frac * forward_ms(params, low + 1, 1)
    return base + params.per_token_ms * tokens_per_req * (bs - 1)


def verify_forward_ms(params: SpeedParams, cfg: SpecConfig, bs: int) -> float:
    """The target's verify forward of one iteration at batch bs, per method (simhost/methods.py)."""
    n = cfg.num_draft_tokens
    if cfg.personality.block_verify:  # DFLASH: one causal chunk of the block
        base = params.verify_ms[1] + methods.BLOCK_VERIFY_MS_PER_TOKEN * (n - 1)
        return base + params.per_token_ms * n * (bs - 1)
    if cfg.kind == "DSPARK":  # the capped prefix plus the bonus token
        p, decay = accept_p_of(params, cfg), cfg.personality.decay
        cap = methods.expected_dspark_cap(p, decay, methods.dspark_drafts(n), cfg.dspark_threshold, bs)
        return forward_tokens_ms(params, 1 + cap, bs)
    return forward_ms(params, n, bs)


def accept_p_of(params: SpeedParams, cfg: SpecConfig) -> float:
    """The method's per-token acceptance at position 1 before the prompt and the spread move it."""
    base = cfg.personality.base_p
    if base is not None:
        return base
    return params.ngram_accept_p if cfg.kind == "NGRAM" else params.accept_p


def uses_cuda_graph(cfg: SpecConfig, bs: int) -> bool:
    return cfg.cuda_graph and bs <= cfg.cuda_graph_max_bs


def iteration_parts(params: SpeedParams, cfg: SpecConfig, bs: int) -> tuple[float, float]:
    """(draft ms, forward ms) of one iteration at batch bs; the forward part carries the no-graph factor and the
    scheduling overhead, so the two always add up to iteration_ms (what EAGLE3_PROFILE prints)."""
    draft = 0.0
    if cfg.algorithm:
        steps = 1 if cfg.personality.one_forward else cfg.num_steps
        draft = steps * draft_step_ms(params, cfg, bs)
        verify = verify_forward_ms(params, cfg, bs)
    else:
        verify = forward_ms(params, 1, bs)
    if not uses_cuda_graph(cfg, bs):
        draft *= params.no_graph_factor
        verify *= params.no_graph_factor
    if not cfg.overlap:
        verify += params.schedule_overhead_ms
    return draft, verify


@dataclass(frozen=True)
class PhaseParts:
    """One iteration split the way a profiler trace shows it (ms): the draft steps, the target's verify forward (the
    decode forward of a baseline), the draft model's extend over the accepted tokens, and the rest (scheduling)."""

    draft: float
    verify: float
    draft_extend: float
    other: float

    @property
    def total(self) -> float:
        return self.draft + self.verify + self.draft_extend + self.other


def attention_jump_ms(params: SpeedParams, tokens_per_req: int) -> float:
    """The part of a batch-1 forward over `tokens_per_req` query tokens above the smooth growth of up to 3 tokens:
    the fitted data's jump, which the attention kernel switching path explains (the traces put it there)."""
    if tokens_per_req <= 3 or 3 not in params.verify_ms:
        return 0.0
    smooth = params.verify_ms[3] + params.verify_ms_per_extra_token * (tokens_per_req - 3)
    return max(0.0, forward_ms(params, tokens_per_req, 1) - smooth)


def phase_parts(params: SpeedParams, cfg: SpecConfig, bs: int) -> PhaseParts:
    """iteration_parts as a trace splits it, adding up to iteration_ms: the forward figure (which folds in the draft
    extend and the scheduling overhead) loses one draft forward's cost to the draft extend and the overhead to
    "other". What the simulated profiler's traces follow (simhost/profiler.py)."""
    draft, forward = iteration_parts(params, cfg, bs)
    other = 0.0 if cfg.overlap else params.schedule_overhead_ms
    extend = 0.0
    if cfg.algorithm:
        extend = draft_step_ms(params, dataclasses.replace(cfg, topk=1), bs)
        if not uses_cuda_graph(cfg, bs):
            extend *= params.no_graph_factor
    return PhaseParts(draft=draft, verify=forward - other - extend, draft_extend=extend, other=other)


def iteration_ms(params: SpeedParams, cfg: SpecConfig, bs: int) -> float:
    """Duration of one decode step (baseline) or one draft+verify iteration (speculative) at batch bs."""
    draft, verify = iteration_parts(params, cfg, bs)
    return draft + verify


def prefill_ms(params: SpeedParams, cfg: SpecConfig, new_tokens: int) -> float:
    ms = params.prefill_fixed_ms + params.prefill_per_token_ms * new_tokens
    if cfg.algorithm:  # the draft model extends over the prompt too
        ms += draft_step_ms(params, cfg, 1)
    return ms


def effective_p(p: float, topk: float, gain: float) -> float:
    """Per-position acceptance with top-k branches (`SpecConfig.branches`): more candidates, more chances one
    matches."""
    return 1 - (1 - p) ** (1 + gain * (topk - 1))


def draw_accepted(rng: random.Random, p: float, max_accepted: int, decay: float = 1.0) -> int:
    """Accepted drafts in one verify step: a run of successes, Bernoulli p each (p x decay**i at position i:
    methods.position_p; at decay 1 exactly p, the draws EAGLE always made), capped."""
    k = 0
    if decay == 1.0:
        while k < max_accepted and rng.random() < p:
            k += 1
        return k
    while k < max_accepted and rng.random() < methods.position_p(p, decay, k):
        k += 1
    return k


def _run_probs(p: float, max_accepted: int, decay: float) -> list[float]:
    """P(exactly k drafts accepted), k = 0..max_accepted."""
    if decay == 1.0:
        return [p**k * (1 - p) for k in range(max_accepted)] + [p**max_accepted]
    probs, alive = [], 1.0
    for k in range(max_accepted):
        q = methods.position_p(p, decay, k)
        probs.append(alive * (1 - q))
        alive *= q
    return [*probs, alive]


def expected_accept_length(p: float, max_accepted: int, decay: float = 1.0) -> float:
    """Expected tokens per request per iteration: accepted drafts + 1 bonus."""
    if decay == 1.0:
        return sum(p**i for i in range(max_accepted + 1))
    return sum((k + 1) * q for k, q in enumerate(_run_probs(p, max_accepted, decay)))


@cache
def expected_iterations(p: float, max_accepted: int, tokens: int, decay: float = 1.0) -> float:
    """Expected iterations to emit `tokens` tokens (the last iteration may overshoot and be truncated)."""
    probs = _run_probs(p, max_accepted, decay)
    e = [0.0] * (tokens + 1)
    for n in range(1, tokens + 1):
        e[n] = 1 + sum(pk * e[max(0, n - (k + 1))] for k, pk in enumerate(probs))
    return e[tokens]


def expected_output_throughput(
    params: SpeedParams, cfg: SpecConfig, input_len: int, output_len: int, concurrency: int
) -> float:
    """Steady-state output tok/s of a closed loop of `concurrency` identical requests (no noise).

    The prefill emits the first token; each of the `concurrency` prefills stalls everyone's decoding.
    """
    p = effective_p(accept_p_of(params, cfg), cfg.branches, params.topk_gain) if cfg.algorithm else 0.0
    decay = cfg.personality.decay if cfg.algorithm else 1.0
    iters = expected_iterations(p, cfg.max_accepted_drafts, output_len - 1, decay)
    total_ms = concurrency * prefill_ms(params, cfg, input_len) + iters * iteration_ms(params, cfg, concurrency)
    return concurrency * output_len / total_ms * 1000


def ground_truth(
    cfg: SpecConfig, concurrency: int, input_len: int = 128, output_len: int = 128, params: SpeedParams | None = None
) -> float | None:
    """The true mean output tok/s of `cfg` at `concurrency` (no noise), or None where the server cannot start
    (graph capture out of memory). What a benchmark scores an auto-tuning study against; see the README's table."""
    if not cfg.fits_graph_memory:
        return None
    return expected_output_throughput(params or SpeedParams(), cfg, input_len, output_len, concurrency)
