"""The draft's report card as `GET /api/experiments/{id}/drafts` and `GET /api/studies/{id}/drafts` give it: per
draft checkpoint its candidates with their served accept length (SpecForge's definition), the training figure on the
same definition, the comparison rows they are (`row_figures`, as the experiment's own `comparison`), the callout,
and the card's answer."""

from __future__ import annotations

from typing import Any

from experiments.analysis import draft_report

from .comparisons import row_figures

SERVED_DEFINITION = (
    "the unweighted mean of per-request accept lengths (bonus token counted), SpecForge's definition: per concurrency "
    "each cell's mean_request_accept_length averaged over cells; overall and per category the requests of the first "
    "cell of each succeeded run"
)
TRAINING_DEFINITION = (
    "1 + sum over the candidate's draft steps of the product of eval/per_position_acc (eval/simulated_acc_len + 1 "
    "where no per-position accuracy is recorded)"
)


def draft_report_json(report: draft_report.DraftReport) -> dict[str, Any]:
    return {
        "answer": report.answer,
        "plateau": report.plateau,
        "callouts": report.callouts,
        "training_note": report.training_note or None,
        "notes": list(report.notes),
        "concurrency": report.levels,
        "served_definition": SERVED_DEFINITION,
        "training_definition": TRAINING_DEFINITION,
        "flag_rule": (
            f"served + its 95% interval's half-width < {draft_report.FAR_BELOW} x the training figure at its depth"
        ),
        "checkpoints": [_checkpoint_json(card) for card in report.checkpoints],
    }


def _checkpoint_json(card: draft_report.CheckpointCard) -> dict[str, Any]:
    t = card.training
    return {
        "draft_path": card.draft_path,
        "label": card.label,
        "provenance": card.provenance,
        "training": None
        if t is None
        else {
            "directory": t.directory,
            "run_id": t.run_id,
            "step": t.step,
            "is_latest": t.is_latest,
            "is_best": t.is_best,
            "exported": bool(t.draft_paths),
            "simulated_acc_len": t.simulated_acc_len,
            "position_acceptance": t.position_acceptance,
        },
        "wins_at": list(card.wins_at),
        "callout": card.callout,
        "best": [_cell_json(cell) for cell in card.best.values()],
        "candidates": [_candidate_json(c) for c in card.candidates],
    }


def _candidate_json(card: draft_report.CandidateCard) -> dict[str, Any]:
    c = card.candidate
    return {
        "candidate": c.name,
        "algorithm": c.algorithm,
        "steps": c.steps,
        "topk": c.topk,
        "draft_tokens": c.draft_tokens,
        "served_accept_length": _round(card.served),
        "served_ci_low": _round(card.served_low),
        "served_ci_high": _round(card.served_high),
        "requests": card.requests,
        "first_cell_concurrency": list(c.first_cells),
        "served_by_concurrency": [{"concurrency": k, "accept_length": _round(v)} for k, v in c.by_concurrency.items()],
        "served_by_category": [{"category": k, "accept_length": _round(v)} for k, v in card.by_category.items()],
        "position_acceptance": [{"concurrency": k, "rates": list(v)} for k, v in c.positions.items()],
        "training_accept_length": _round(card.training),
        "training_note": card.training_note,
        "far_below_training": card.far_below,
        "cells": [_cell_json(cell) for cell in card.cells.values()],
    }


def _cell_json(cell: draft_report.Cell) -> dict[str, Any]:
    return {
        "concurrency": cell.concurrency,
        "candidate": cell.candidate,
        **row_figures(cell.row),
        "said": cell.said,
        "reasons": list(cell.reasons),
        "may_win": cell.may_win,
        "wins": cell.wins,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
