"""The deployment view's JSON (analysis/deployment_view.py): curves, frontier, each gain with the question it answers
and the same concurrency's answer beside it, the SLO, and every cell with its cost, goodput and energy."""

from __future__ import annotations

from typing import Any

from experiments.analysis import deployment
from experiments.analysis.deployment_view import DEFINITIONS, DeploymentCell, DeploymentView, same_pace


def deployment_json(view: DeploymentView) -> dict[str, Any]:
    return {
        "definitions": DEFINITIONS,
        "gpus": view.gpus,
        "cost_per_gpu_hour": view.cost_per_gpu_hour,
        "curves": {
            name: [_point_json(p) | {"cost_per_million_output_tokens": view.cost(name, p)} for p in points]
            for name, points in view.curves.items()
        },
        "frontier": [{"config": f.config, "concurrency": f.point.concurrency} for f in view.frontier],
        "gains": {
            name: [
                {"baseline_concurrency": level, "interactivity": _round(pace)}
                | ({"ratio": g.ratio, "low": g.low, "high": g.high} if g else {"ratio": None})
                | _questions_json(view, name, level, pace, g)
                for level, pace, g in gains
            ]
            for name, gains in view.gains.items()
        },
        "slo": (
            {"metric": view.slo.metric, "percentile": view.slo.percentile, "limit_ms": view.slo.limit_ms}
            if view.slo
            else None
        ),
        "slo_highest_concurrency": view.slo_reach if view.slo else None,
        "slo_concurrencies_meeting": view.slo_meeting if view.slo else None,
        "cells": {name: [_cell_json(cell) for cell in cells] for name, cells in view.cells.items()},
        "headlines": view.headlines,
    }


def _questions_json(
    view: DeploymentView, name: str, level: int, pace: float, gain: deployment.Gain | None
) -> dict[str, Any]:
    """What a gain's entry answers, and the same concurrency's answer beside it (None before it is known)."""
    row = view.same_concurrency.get(name, {}).get(level)
    return {
        "question": f"at {same_pace(pace)}",
        "candidate_concurrencies": list(gain.concurrencies) if gain else [],
        "same_concurrency": None
        if row is None
        else {
            "question": f"at the same concurrency, c={level} each",
            "concurrency": level,
            "speedup": row.speedup,
            "low": row.ci_low,
            "high": row.ci_high,
            "verdict": row.verdict,
        },
    }


def _cell_json(cell: DeploymentCell) -> dict[str, Any]:
    g = cell.goodput
    return {
        "concurrency": cell.concurrency,
        "passes": cell.passes,
        "output_throughput": cell.output_throughput,
        "input_throughput": cell.input_throughput,
        "cost_per_million_output_tokens": cell.cost_per_million_output_tokens,
        "cost_per_million_input_tokens": cell.cost_per_million_input_tokens,
        "slo_met": cell.slo_met,
        "goodput_requests_per_s": g.requests_per_s if g else None,
        "goodput_output_tok_s": g.output_tok_s if g else None,
        "slo_attainment": g.attainment if g else None,
        "slo_requests": g.total if g else None,
        "slo_requests_met": g.met if g else None,
        "joules_per_output_token": cell.energy.joules_per_token,
        "joules": cell.energy.joules,
        "energy_gaps": list(cell.energy.gaps),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _point_json(p: deployment.CurvePoint) -> dict[str, Any]:
    return {
        "concurrency": p.concurrency,
        "tok_s_per_gpu": p.tok_s_per_gpu,
        "tok_s_per_gpu_low": p.tok_s_per_gpu_low,
        "tok_s_per_gpu_high": p.tok_s_per_gpu_high,
        "interactivity": p.interactivity,
        "interactivity_low": p.interactivity_low,
        "interactivity_high": p.interactivity_high,
        "n": p.n,
    }
