"""The bake-off as `GET /api/experiments/{id}/bakeoff` and `GET /api/studies/{id}/bakeoff` give it: every method's
cells with the figures of the comparison rows they are (`row_figures`, as the experiment's own `comparison`), its costs,
the bands and the headline."""

from __future__ import annotations

from typing import Any

from experiments.analysis import bakeoff

from .comparisons import row_figures


def bakeoff_json(view: bakeoff.Bakeoff) -> dict[str, Any]:
    """The API's shape: every line's cells with their rows' figures, the bands and the headline."""
    return {
        "baseline": view.baseline,
        "headline": view.headline,
        "concurrency": view.levels,
        "baseline_kv_tokens": view.baseline_kv_tokens,
        "methods": [
            {
                "method": line.method.algorithm,
                "engine": line.method.engine,
                "label": line.method.label,
                "candidates": list(line.candidates),
                "kv_tokens": line.costs.kv_tokens,
                "kv_tokens_given_up": line.kv_tokens_given_up,
                "kv_share_given_up": line.kv_share_given_up,
                "draft_weights_gib": line.costs.draft_weights_gib,
                "costs": line.cost_text,
                "cells": [
                    {
                        "concurrency": cell.concurrency,
                        "candidate": cell.candidate,
                        **row_figures(cell.row),
                        "said": cell.said,
                        "reasons": list(cell.reasons),
                        "gate": {"outcome": cell.gate.outcome, "message": cell.gate.message},
                        "wins": cell.wins,
                    }
                    for cell in line.cells.values()
                ],
            }
            for line in view.lines
        ],
        "bands": [
            {
                "low": band.low,
                "high": band.high,
                "label": band.label,
                "method": band.method.label if band.method else None,
                "winners": [
                    {"concurrency": w.concurrency, "candidate": w.candidate, "settled": w.settled} for w in band.winners
                ],
            }
            for band in view.bands
        ],
    }
