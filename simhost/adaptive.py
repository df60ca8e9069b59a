"""Adaptive speculation (`--speculative-adaptive`, SGLang 0.5.23 `speculative/adaptive_spec_params.py`) and
simulated acceptance (`SGLANG_SIMULATE_ACC_LEN`, `speculative/spec_utils.py`), pure: no I/O but reading the config
text it is given, no clock.

Adaptive: the config is a JSON object keyed by batch-size thresholds as strings; each slot has `candidate_steps`
and may override the EMA knobs. A batch is padded up to the next captured CUDA-graph batch size, then routed to the
slot with the largest key not above it (the smallest key below all). Each slot keeps an EMA of the accepted drafts
per request and, every `update_interval` verify steps after `warmup_batches`, moves its steps one candidate at a
time towards round(EMA) + 1: down while the EMA is at most `prev - 0.5 + down_hysteresis` (0.5 + hysteresis when
the lower candidate is 0, no speculation), else up while it is above `current - 0.5 + up_hysteresis`. A slot at 0
steps has no acceptance to read, so it probes the next candidate up at its next update.

Simulated acceptance: every verify step of the whole batch accepts the same sampled length (SGLang samples one per
batch), `match-expected` choosing floor or ceil of the set length in proportion so the mean is the set length, and
`multinomial` rounding a normal draw (sd 1) clamped to [1, max]; either way the length is capped at the drafts a
step can accept + 1.
"""

from __future__ import annotations

import bisect
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# SGLang's DEFAULT_ADAPTIVE_CONFIG (reference d3), used when --speculative-adaptive-config is not given.
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}
SLOT_DEFAULTS: dict[str, float] = {
    "ema_alpha": 0.2,
    "update_interval": 5,
    "warmup_batches": 10,
    "up_hysteresis": 0.0,
    "down_hysteresis": -0.25,
    "ceiling_coeff": 0,
}
SIMULATE_METHODS = ("match-expected", "multinomial")
SIMULATE_TOKEN_MODES = ("fixed", "real-draft-token")
# The token id SGLang's fixed token mode writes for every simulated-accepted token ("some legit token id").
FIXED_TOKEN_ID = 100


def parse_config(text: str | None) -> dict[str, Any]:
    """The config object (the default when no file is given); SGLang's ValueErrors for a bad one."""
    cfg = json.loads(text) if text is not None else DEFAULT_CONFIG
    if not isinstance(cfg, dict):
        raise ValueError(f"speculative adaptive config must be a JSON object, got {type(cfg).__name__}")
    slots = 0
    for key, entry in cfg.items():
        if not key.isdigit():
            continue  # shared knobs (ema_alpha, ...) live beside the batch-size keys
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        valid = isinstance(steps, list) and steps and all(type(s) is int and s >= 0 for s in steps)
        if not valid:
            raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        slots += 1
    if not slots:
        raise ValueError(
            "speculative_adaptive_config must contain at least one integer-string "
            'BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. '
            f"Got keys: {list(cfg.keys())}"
        )
    return cfg


def candidate_steps(cfg: Mapping[str, Any]) -> list[int]:
    """The union of every slot's candidate steps (what SGLang sizes its buffers and CUDA graphs for)."""
    return sorted({s for key, entry in cfg.items() if key.isdigit() for s in entry["candidate_steps"]})


def unsupported_reason(args: Any) -> str | None:
    """Why adaptive speculation cannot run with these server args (SGLang then warns and runs static), or None."""
    algo = getattr(args, "speculative_algorithm", None)
    topk = getattr(args, "speculative_eagle_topk", None)
    if algo not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if getattr(args, "enable_dp_attention", False):
        return "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"
    if getattr(args, "enable_multi_layer_eagle", False):
        return "enable_multi_layer_eagle=True is not supported (MultiLayerEagleWorkerV2 does not implement adaptive)"
    if getattr(args, "enable_two_batch_overlap", False):
        return (
            "enable_two_batch_overlap=True is not supported "
            "(adaptive state swap would discard the TboAttnBackend wrapper)"
        )
    if getattr(args, "enable_pdmux", False):
        return "enable_pdmux=True is not supported (adaptive state swap does not update decode_attn_backend_group)"
    return None


class StepSlot:
    """One batch-size slot: the EMA of accepted drafts per request and the steps it has chosen."""

    def __init__(self, initial_steps: int, cfg: Mapping[str, Any]) -> None:
        self.candidates = sorted(set(cfg["candidate_steps"]))
        knob = {name: cfg.get(name, default) for name, default in SLOT_DEFAULTS.items()}
        self.ema_alpha = float(knob["ema_alpha"])
        self.update_interval = max(1, int(knob["update_interval"]))
        self.warmup_batches = int(knob["warmup_batches"])
        self.up_hysteresis = float(knob["up_hysteresis"])
        self.down_hysteresis = float(knob["down_hysteresis"])
        self.ceiling_coeff = float(knob["ceiling_coeff"])
        if initial_steps in self.candidates:
            self.steps = initial_steps
        else:
            self.steps = self.candidates[len(self.candidates) // 2]
        # A neutral start: the EMA of a slot that accepts exactly what its steps probe for.
        self.ema = float(self.steps - 1)
        self.batches = 0

    def update(self, accepted_per_request: list[int]) -> bool:
        """Feed one verify step's accepted drafts per request; True when the steps changed."""
        if not accepted_per_request:
            return False
        if self.steps > 0:
            mean = sum(accepted_per_request) / len(accepted_per_request)
            self.ema = (1 - self.ema_alpha) * self.ema + self.ema_alpha * mean
        self.batches += 1
        if self.batches <= self.warmup_batches or (self.batches - self.warmup_batches) % self.update_interval:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        old = self.steps
        index = self.candidates.index(old)
        if old == 0:  # nothing to read at 0 steps: probe the next candidate up
            target = self.candidates[min(index + 1, len(self.candidates) - 1)]
            if target > 0 and self.ema < 0:
                self.ema = float(target - 1)
            self.steps = target
            return target != old
        start = index
        while index > 0:
            lower = self.candidates[index - 1]
            threshold = (0.5 if lower == 0 else lower - 0.5) + self.down_hysteresis
            if self.ema > threshold:
                break
            index -= 1
        if index == start:
            while index < len(self.candidates) - 1 and self.ema > self.candidates[index] - 0.5 + self.up_hysteresis:
                index += 1
        target = self.candidates[index]
        if self.ceiling_coeff > 0:  # caps only a hold or a move down, never a step up
            ceiling = max(1, math.ceil(self.ema * self.ceiling_coeff))
            if ceiling < target <= old:
                while index > 0 and self.candidates[index] > ceiling:
                    index -= 1
                target = self.candidates[index]
        self.steps = target
        return target != old


@dataclass(frozen=True)
class StepChange:
    old: int
    new: int
    ema: float

    @property
    def log_line(self) -> str:
        return f"Adaptive spec params updated: steps {self.old} -> {self.new} (ema_accept_len={self.ema:.2f})"


class AdaptiveSteps:
    """Routes a batch size to its slot: the steps to run at that batch, and the EMA update after the verify."""

    def __init__(self, cfg: Mapping[str, Any], initial_steps: int, cuda_graph_bs: list[int] | None) -> None:
        shared = {k: v for k, v in cfg.items() if not k.isdigit()}
        self.slots = {
            int(key): StepSlot(initial_steps, {**shared, **entry}) for key, entry in cfg.items() if key.isdigit()
        }
        self.keys = sorted(self.slots)
        self.graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None
        self.max_steps = max(max(slot.candidates) for slot in self.slots.values())

    @property
    def init_line(self) -> str:
        first = self.slots[self.keys[0]]
        return f"AdaptiveSpeculativeParams initialized: steps={first.steps}, candidate_steps={first.candidates}"

    def slot_key(self, batch_size: int) -> int:
        if self.graph_bs is not None:
            i = bisect.bisect_left(self.graph_bs, batch_size)
            if i < len(self.graph_bs):
                batch_size = self.graph_bs[i]  # the CUDA graph this batch is padded into
        return self.keys[max(0, bisect.bisect_right(self.keys, batch_size) - 1)]

    def steps_for_batch(self, batch_size: int) -> int:
        return self.slots[self.slot_key(batch_size)].steps

    def on_verify(self, accepted_per_request: list[int], batch_size: int) -> StepChange | None:
        slot = self.slots[self.slot_key(batch_size)]
        old = slot.steps
        return StepChange(old, slot.steps, slot.ema) if slot.update(accepted_per_request) else None


@dataclass(frozen=True)
class SimulatedAcceptance:
    """SGLANG_SIMULATE_ACC_LEN and its method / token mode, as the server's environment sets them."""

    length: float
    method: str = "match-expected"
    token_mode: str = "fixed"

    @classmethod
    def from_env(cls, env: Mapping[str, str], default_method: str) -> SimulatedAcceptance | None:
        """None when off (unset, or not above 0, as SGLang's -1 default); a float that does not parse is a
        ValueError at startup (SGLang's EnvFloat reading it)."""
        raw = env.get("SGLANG_SIMULATE_ACC_LEN", "").strip()
        if not raw:
            return None
        length = float(raw)
        if not length > 0 or not math.isfinite(length):
            return None
        return cls(
            length,
            env.get("SGLANG_SIMULATE_ACC_METHOD") or default_method,
            env.get("SGLANG_SIMULATE_ACC_TOKEN_MODE") or "fixed",
        )

    @property
    def error(self) -> str | None:
        """The ValueError SGLang raises at the first verify step (the warm-up's), or None."""
        if self.method not in SIMULATE_METHODS:
            return f"Invalid simulate_acc_method: {self.method}"
        if self.token_mode not in SIMULATE_TOKEN_MODES:
            return f"Invalid simulate_acc_token_mode: {self.token_mode}"
        return None

    def draw(self, rng: random.Random, max_length: int) -> int:
        """One verify step's accept length (accepted drafts + the bonus token), in [1, max_length]."""
        if self.method == "multinomial":
            return round(min(max(rng.gauss(self.length, 1.0), 1.0), max_length))
        length = max(1.0, min(float(max_length), self.length))
        lower = int(length)
        if lower >= max_length:
            return max_length
        return lower + 1 if rng.random() < length - lower else lower
