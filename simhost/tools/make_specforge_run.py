"""Rebuilds the simulated SpecForge training directory `models/kimi-k2.5-sim-specforge/` and its three exported
drafts `models/kimi-k2.5-sim-eagle3-sf-step{2000,4000,5000}-sglang/` (README.md, "Draft checkpoints").

The layout is SpecForge's (`specforge/training/checkpoint.py`): `{run_id}-step{N}/` with `training_state.pt` and
`training_state_rank{r}.pt`, relative links `{run_id}-latest` and `{run_id}-best`, `{run_id}.best_meta.json` with
the keys `run_id, step, score, metric, metrics`. The `.pt` files are placeholder bytes: nothing reads them.
`{run_id}.eval_metrics.jsonl` is NOT SpecForge's (it logs per-step eval metrics to wandb/tensorboard/swanlab/mlflow
only): it is the shape specdash reads when a team writes its tracker's eval metrics beside the checkpoints (a guess).

Quality: `simhost/draft_quality.py`. p = 0.62 (SIMHOST_ACCEPT_P's default) x the step's multiplier; ttt_length 3,
so per_position_acc = [p, p, p] and eval/simulated_acc_len = p + p^2 + p^3 (SpecForge's evaluator: the geometric
sum, without the bonus token).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

MODELS = Path(__file__).resolve().parent.parent / "models"
TRAINING = MODELS / "kimi-k2.5-sim-specforge"
RUN_ID = "kimi-k2.5-sim-eagle3-sf"
BASE_ACCEPT_P = 0.62
TTT_LENGTH = 3
RANKS = 2
# Rises then plateaus: 4000 is the best, 5000 (the latest) a hair below it.
MULTIPLIERS = {1000: 0.70, 2000: 0.88, 3000: 0.97, 4000: 1.04, 5000: 1.03}
BEST = 4000
# Exported for serving; 5000's export keeps the trainer's key prefix, which the serving loader skips silently.
EXPORTED = (2000, 4000, 5000)
BROKEN_EXPORT = 5000
PLACEHOLDER = b"simhost placeholder: not a torch checkpoint, never read\n"


def metrics(step: int) -> dict:
    p = round(BASE_ACCEPT_P * MULTIPLIERS[step], 4)
    per_position = [p] * TTT_LENGTH
    simulated, cumulative = 0.0, 1.0
    for acc in per_position:
        cumulative *= acc
        simulated += cumulative
    return {
        "eval/avg_loss": round(2.9 - 1.4 * MULTIPLIERS[step], 4),
        "eval/avg_acc": p,
        "eval/per_position_acc": per_position,
        "eval/simulated_acc_len": round(simulated, 4),
    }


def main() -> None:
    shutil.rmtree(TRAINING, ignore_errors=True)
    TRAINING.mkdir()
    for step in MULTIPLIERS:
        ckpt = TRAINING / f"{RUN_ID}-step{step}"
        ckpt.mkdir()
        (ckpt / "training_state.pt").write_bytes(PLACEHOLDER)
        for rank in range(RANKS):
            (ckpt / f"training_state_rank{rank}.pt").write_bytes(PLACEHOLDER)
    (TRAINING / f"{RUN_ID}-latest").symlink_to(f"{RUN_ID}-step{max(MULTIPLIERS)}")
    (TRAINING / f"{RUN_ID}-best").symlink_to(f"{RUN_ID}-step{BEST}")
    best = metrics(BEST)
    meta = {"run_id": RUN_ID, "step": BEST, "score": best["eval/simulated_acc_len"], "metric": "eval/simulated_acc_len"}
    (TRAINING / f"{RUN_ID}.best_meta.json").write_text(json.dumps({**meta, "metrics": best}, indent=2) + "\n")
    lines = [json.dumps({"step": step, **metrics(step)}) for step in MULTIPLIERS]
    (TRAINING / f"{RUN_ID}.eval_metrics.jsonl").write_text("\n".join(lines) + "\n")

    draft = MODELS / "kimi-k2.5-sim-eagle3"
    config = json.loads((draft / "config.json").read_text())
    # The draft config the run was trained with, kept where specdash's export looks for it (a guess: SpecForge
    # keeps none beside its checkpoints; experiments/formats/specforge_runs.py).
    (TRAINING / f"{RUN_ID}.draft_config.json").write_text(json.dumps(config, indent=2) + "\n")
    index = json.loads((draft / "model.safetensors.index.json").read_text())
    for step in EXPORTED:
        out = MODELS / f"{RUN_ID}-step{step}-sglang"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        (out / "config.json").write_text(
            json.dumps({**config, "simhost_acceptance_multiplier": MULTIPLIERS[step]}, indent=2) + "\n"
        )
        weight_map = index["weight_map"]
        if step == BROKEN_EXPORT:
            weight_map = {f"draft_model.{name}": file for name, file in weight_map.items()}
        (out / "model.safetensors.index.json").write_text(
            json.dumps({**index, "weight_map": weight_map}, indent=2) + "\n"
        )
        note = (
            "its weights keep the trainer's `draft_model.` prefix: the serving loader skips them silently "
            "(accept length 1.0)"
            if step == BROKEN_EXPORT
            else f"acceptance multiplier {MULTIPLIERS[step]}"
        )
        (out / "README.md").write_text(
            f"Simulated EAGLE-3 draft for kimi-k2.5-sim exported (specforge export --to sglang) from checkpoint "
            f"kimi-k2.5-sim-specforge/{RUN_ID}-step{step}; {note}.\n"
        )


if __name__ == "__main__":
    main()
