"""vLLM's engine on simhost's batching loop: the same speed model, acceptance model and outputs as the SGLang
personality (simhost/engine.py), with vLLM's speculative-decoding counters and no per-batch log lines.

"The same hardware": vLLM's EAGLE/EAGLE-3 drafts a top-1 chain of `num_speculative_tokens` K tokens (no topk, no
separate steps: reference §1.2), which is SGLang's `--speculative-num-steps K --speculative-eagle-topk 1
--speculative-num-draft-tokens K+1`; vLLM runs spec decoding without async scheduling (0.11: "speculative decoding
is not supported with async scheduling"), which is SGLang's spec v1 with its overlap scheduler off. So for the same
model, draft, K and prompts both engines give the same throughput; a vLLM baseline has the overlap only with
`--async-scheduling`.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

from simhost.engine import Engine, Request
from simhost.vllm.args import EngineSetup

# The speed model's algorithm names for vLLM's methods (simhost/methods.py): mtp is EAGLE on the target's own
# checkpoint (MTP), draft_model SGLang's STANDALONE, suffix an n-gram-like lookup without a draft model (NGRAM's
# personality: a guess), dflash and dspark the block drafters.
ALGORITHMS = {
    "eagle3": "EAGLE3",
    "eagle": "EAGLE",
    "ngram": "NGRAM",
    "mtp": "EAGLE",
    "draft_model": "STANDALONE",
    "suffix": "NGRAM",
    "dflash": "DFLASH",
    "dspark": "DSPARK",
}
# vLLM's largest CUDA-graph capture size by default (0.11: min(2 x max_num_seqs, 512)).
GRAPH_MAX_BS = 512


def engine_args(setup: EngineSetup) -> types.SimpleNamespace:
    """The SGLang-named settings simhost's Engine reads, from a vLLM launch."""
    a, spec = setup.args, setup.spec
    k = spec.num_spec_tokens if spec else 0
    # K drafts: SGLang's K steps at topk 1 and K + 1 draft tokens; a DSpark block of K drafts.
    draft_tokens = (k if spec.method == "dspark" else k + 1) if spec else 1
    steps = 1 if spec and spec.method in ("dflash", "dspark") else k
    return types.SimpleNamespace(
        model_path=a.model,
        speculative_draft_model_path=spec.model if spec else None,
        tp_size=a.tp,
        disable_radix_cache=not a.enable_prefix_caching,
        max_prefill_tokens=setup.max_num_batched_tokens,
        decode_log_interval=10**9,  # vLLM prints no per-batch lines
        speculative_algorithm=ALGORITHMS[spec.method] if spec else None,
        speculative_num_steps=steps,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=draft_tokens,
        disable_overlap_schedule=bool(spec) or not a.async_scheduling,
        disable_cuda_graph=a.enforce_eager,
        cuda_graph_max_bs=GRAPH_MAX_BS,
        weight_version="default",
        served_model_name=a.served_model_name,
    )


@dataclass
class SpecCounts:
    """vLLM's SpecDecodingStats: drafts = (request, step) pairs that carried drafts."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted: int = 0
    per_position: list[int] = field(default_factory=list)

    def observe(self, k: int, accepted: int) -> None:
        if len(self.per_position) < k:
            self.per_position += [0] * (k - len(self.per_position))
        self.num_drafts += 1
        self.num_draft_tokens += k
        self.num_accepted += accepted
        for i in range(accepted):
            self.per_position[i] += 1


class VllmEngine(Engine):
    def __init__(self, setup: EngineSetup, *args: Any, **kwargs: Any) -> None:
        super().__init__(engine_args(setup), *args, **kwargs)
        self.k = setup.spec.num_spec_tokens if setup.spec else 0
        self.totals = SpecCounts(per_position=[0] * self.k)  # /metrics
        self.window = SpecCounts(per_position=[0] * self.k)  # since the last printed SpecDecoding line
        # rid -> accepted drafts per verify step (the per-request metrics of 0.30+)
        self.per_request: dict[str, list[int]] = {}

    def _log(self, message: str) -> None:
        """vLLM has no Prefill/Decode batch lines: its statistics are logged by the API server (logger.py)."""

    def submit(self, req: Request) -> None:
        super().submit(req)
        if self.cfg.algorithm:
            self.per_request[req.rid] = []

    async def _decode(self) -> None:
        before = [(req, len(req.output_ids), req.verify_ct) for req in self.running if not req.finished]
        await super()._decode()
        if not self.cfg.algorithm:
            return
        for req, tokens, verifies in before:
            if req.verify_ct == verifies:
                continue
            # num_accepted = generated tokens - 1 (reference §3.1); the last step keeps only the tokens left.
            accepted = len(req.output_ids) - tokens - 1
            self.totals.observe(self.k, accepted)
            self.window.observe(self.k, accepted)
            steps = self.per_request.get(req.rid)
            if steps is not None:
                steps.append(accepted)

    def take_window(self) -> SpecCounts:
        window, self.window = self.window, SpecCounts(per_position=[0] * self.k)
        return window

    def request_spec_metrics(self, req: Request, detailed: bool) -> dict[str, Any] | None:
        """`metrics.speculative_decoding` of 0.30+ (`--per-request-spec-decode-metrics`; reference §6)."""
        steps = self.per_request.pop(req.rid, None)
        if steps is None or not self.cfg.algorithm:
            return None
        accepted = sum(steps)
        drafted = len(steps) * self.k
        histogram = [0] * (self.k + 1)
        for count in steps:
            histogram[count] += 1
        out: dict[str, Any] = {
            "mean_acceptance_length": 1 + accepted / len(steps) if steps else 1.0,
            "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
            "acceptance_histogram": histogram,
            "num_spec_steps": len(steps),
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": drafted,
            "num_spec_tokens": self.k,
        }
        if detailed:
            out |= {"per_step_accepted": steps, "per_step_drafted": [self.k] * len(steps)}
        return out

    def forget(self, req: Request) -> None:
        self.per_request.pop(req.rid, None)
