"""A draft checkpoint's quality, as the simulator serves it (pure but for reading two small files of the draft dir).

Real drafts differ by how well they were trained; the simulated ones carry that as a number of the simulator's own:
`simhost_acceptance_multiplier` in the draft's config.json (no real config has it; SGLang and transformers ignore
unknown config keys), which multiplies the per-token acceptance probability (`SIMHOST_ACCEPT_P`). Absent: 1.0, the
drafts that predate it (kimi-k2.5-sim-eagle3) serve as before.

And the draft whose weights the serving loader silently skips: SpecForge's sglang exporter warns that "a key the
serving loader does not expect is skipped ... without an error" (specdash's reference, speculative-observability.md
d5). A draft dir whose `model.safetensors.index.json` keeps every key under the trainer's `draft_model.` prefix (so
none is a key the loader reads: `fc.weight`, `norm.weight`, `lm_head.weight`, `t2d`, `d2t`, the exporter's required
keys) serves with an uninitialised head: every draft rejected, accept length 1.0, no
error and no warning. The training metrics of its checkpoint stay good: that is the point of the case.

The simulated training directory `models/kimi-k2.5-sim-specforge/` and its three exports are built on these rules
(see README.md, "Draft checkpoints"): its `eval/simulated_acc_len` is p + p^2 + p^3 with p = 0.62 x the multiplier
(ttt_length 3), so at 3 steps, topk 1 and prompts sent as token ids the served accept length is about that + 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MULTIPLIER_KEY = "simhost_acceptance_multiplier"
# The keys SGLang's EAGLE3 draft loader reads (SpecForge's to_sglang.py `_REQUIRED_SERVING_KEYS`).
SERVING_KEYS = ("fc.weight", "norm.weight", "lm_head.weight", "t2d", "d2t")
# The prefix SpecForge's trainer keeps the draft's weights under: an export whose every key still carries it is one the
# serving loader reads nothing of.
TRAINER_PREFIX = "draft_model."
# Bounds on the simulator's own number: a typo in a config must not make a draft accept everything.
MULTIPLIER_BOUNDS = (0.0, 2.0)


def acceptance_multiplier(draft_config: dict[str, Any] | None) -> float:
    """The multiplier on the per-token acceptance probability a draft's config.json carries; 1.0 when absent or
    not a number in MULTIPLIER_BOUNDS."""
    value = (draft_config or {}).get(MULTIPLIER_KEY)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 1.0
    low, high = MULTIPLIER_BOUNDS
    return float(value) if low <= value <= high else 1.0


def weights_skipped(draft_dir: str | None) -> bool:
    """Whether the serving loader would load none of the draft's head weights: its index lists weights, none of
    them under a name the loader reads. A dir without an index is not judged (False)."""
    if not draft_dir:
        return False
    try:
        index = json.loads((Path(draft_dir) / "model.safetensors.index.json").read_text())
    except (OSError, ValueError):
        return False
    names = set((index.get("weight_map") or {}) if isinstance(index, dict) else {})
    # Judged by the trainer's prefix, not by the EAGLE-3 head's key names: drafts of other methods (a standalone LM,
    # a DFlash drafter) load keys of their own.
    return bool(names) and all(name.startswith(TRAINER_PREFIX) for name in names)
