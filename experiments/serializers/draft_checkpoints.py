"""A host's draft training directories as read live (formats/specforge_runs.py): the one JSON shape of the
`GET /api/hosts/{id}/draft-checkpoints` answer, the page's data and what a worker sends back.

Per checkpoint, `simulated_acc_len` is SpecForge's training figure as recorded (without the bonus token) and
`served_definition` the same + 1: the served accept length's definition (bonus token counted, per request), the one
to compare with what a server reports."""

from __future__ import annotations

from typing import Any

from experiments.formats.specforge_runs import Checkpoint, TrainingDirectory, TrainingRun


def training_directory_json(path: str, directory: TrainingDirectory) -> dict[str, Any]:
    """`path` as the host's setting names it; the directory as the host resolved and listed it."""
    return {
        "path": path,
        "resolved_path": directory.path,
        "refusal": None,
        "runs": [_run_json(run) for run in directory.runs],
        "skipped": [{"name": s.name, "reason": s.reason} for s in directory.skipped],
        "problems": list(directory.problems),
    }


def refused_directory_json(path: str, refusal: str) -> dict[str, Any]:
    """A directory not read, and why (outside the models root, missing, unreadable)."""
    return {"path": path, "resolved_path": None, "refusal": refusal, "runs": [], "skipped": [], "problems": []}


def _run_json(run: TrainingRun) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "latest_step": run.latest_step,
        "best_step": run.best_step,
        "best_metric": run.best_metric,
        "best_score": run.best_score,
        "problems": list(run.problems),
        "draft_config": run.draft_config,  # null: no {run_id}.draft_config.json, so no export from here
        "checkpoints": [_checkpoint_json(c) for c in run.checkpoints],
    }


def _checkpoint_json(c: Checkpoint) -> dict[str, Any]:
    return {
        "step": c.step,
        "path": c.path,
        "rank_files": c.rank_files,
        "size_bytes": c.size_bytes,
        "is_latest": c.is_latest,
        "is_best": c.is_best,
        "exported": bool(c.exports),
        "draft_paths": list(c.exports),  # each usable as a config's draft model path
        "metrics": dict(c.metrics),
        "simulated_acc_len": c.simulated_acc_len,
        "served_definition": c.served_definition,
    }
