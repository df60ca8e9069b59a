"""The training side of the draft's report card (pure): the checkpoints of a host's training directories as a worker
answered (`serializers.draft_checkpoints.training_directory_json`), checked rather than trusted, and each one's
training figure on the served accept length's definition at a draft depth.

SpecForge's `eval/simulated_acc_len` is Σ_k Π_{i ≤ k} acc_i over every trained position of `eval/per_position_acc`,
without the bonus token (reference speculative-observability.md d5): 1 + the same sum over the first d positions is
what a draft served with d speculative steps accepts per request on average, the served definition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MAX_POSITIONS = 64


@dataclass(frozen=True)
class TrainingCheckpoint:
    directory: str
    run_id: str
    step: int
    is_latest: bool
    is_best: bool
    draft_paths: tuple[str, ...]
    simulated_acc_len: float | None  # SpecForge's, without the bonus token
    per_position_acc: tuple[float, ...] = ()

    @property
    def position_acceptance(self) -> list[float]:
        """The share of verify steps that accept at least j drafts, j = 1.. (Π_{i ≤ j} acc_i): the served
        per-position acceptance's definition."""
        out, product = [], 1.0
        for acc in self.per_position_acc:
            product *= acc
            out.append(product)
        return out

    def accept_length(self, depth: int | None) -> tuple[float | None, str]:
        """The training figure on the served definition at draft depth `depth`, and what it is taken over."""
        rates = self.position_acceptance
        if rates and depth:
            used = min(depth, len(rates))
            note = f"over the first {used} of {len(rates)} trained positions"
            if depth > len(rates):
                note = f"over the {len(rates)} trained positions (served with {depth} steps)"
            return 1 + sum(rates[:used]), note
        if self.simulated_acc_len is None:
            return None, "no eval/simulated_acc_len recorded"
        return self.simulated_acc_len + 1, "eval/simulated_acc_len + 1, at the training's own draft length"


def training_checkpoints(directories: Iterable[Any]) -> list[TrainingCheckpoint]:
    """The checkpoints of `training_directory_json` answers (each directory's runs' checkpoints); a value of another
    type than the shape's is left out (a worker's answer is checked, not trusted)."""
    out = []
    for directory in directories:
        runs = directory.get("runs") if isinstance(directory, Mapping) else None
        for run in runs if isinstance(runs, list) else []:
            checkpoints = run.get("checkpoints") if isinstance(run, Mapping) else None
            for c in checkpoints if isinstance(checkpoints, list) else []:
                if not isinstance(c, Mapping) or type(c.get("step")) is not int:  # (a bool is no step)
                    continue
                paths = c.get("draft_paths")
                metrics = c.get("metrics")
                positions = metrics.get("eval/per_position_acc") if isinstance(metrics, Mapping) else None
                simulated: Any = c.get("simulated_acc_len")
                out.append(
                    TrainingCheckpoint(
                        directory=str(directory.get("path") or ""),
                        run_id=str(run.get("run_id") or ""),
                        step=c["step"],
                        is_latest=c.get("is_latest") is True,
                        is_best=c.get("is_best") is True,
                        draft_paths=tuple(p for p in paths if isinstance(p, str)) if isinstance(paths, list) else (),
                        simulated_acc_len=float(simulated) if _is_number(simulated) else None,
                        per_position_acc=tuple(float(v) for v in positions[:MAX_POSITIONS])
                        if isinstance(positions, list) and all(_is_number(v) for v in positions)
                        else (),
                    )
                )
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
