"""The JSON of the one `analysis.Comparison`: its rows (the DESIGN.md contract's `comparison` rows and more), its
verdict sentences and its gate rules, as the experiment API, Compare's API, the export and the CLI read them."""

from __future__ import annotations

from typing import Any

from experiments import analysis


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def comparison_row_json(comparison: analysis.Comparison, row: analysis.ComparisonRow) -> dict[str, Any]:
    """One row: its numbers, its verdict with the reasons the sentence gives, and the CLI gate's reading of it."""
    simulated = row.candidate in comparison.simulated
    slower = comparison.slower_gate(row)
    return {
        "candidate": row.candidate,
        "concurrency": row.concurrency,
        "baseline_tok_s": round(row.baseline_tok_s, 3),
        "candidate_tok_s": round(row.candidate_tok_s, 3),
        **row_figures(row),
        "outputs_differ": row.verdict == analysis.OUTPUTS_DIFFER,
        "simulated_acceptance": simulated,
        "speed_verdict": row.speed_verdict or row.verdict,
        "baseline_n": row.baseline_n,
        "candidate_n": row.candidate_n,
        "runs_needed": row.runs_needed,
        "launches_needed": comparison.launches(row),
        "needs": comparison.needs(row),
        # The ratio and interval as the pages print them, and why the verdict is what it is.
        "said": comparison.said(row),
        "reasons": comparison.reasons(row),
        "accept_length": _round(comparison.accept_length.get((row.candidate, row.concurrency)), 4),
        "acceptance_collapsed": comparison.collapsed(row) is not None,
        # Why the row measures a degenerate benchmark (its candidate's runs, or the baseline's); null when it does not.
        "degenerate": comparison.degenerate_reason(row),
        # The `slower` gate's reading of this row (null for simulated acceptance, which no gate judges).
        "gate": None if simulated else {"outcome": slower.outcome, "message": slower.message},
    }


def row_figures(row: analysis.ComparisonRow) -> dict[str, Any]:
    """A row's speedup, interval and verdict as every JSON shape states them (the bake-off's cells too)."""
    return {
        "speedup": round(row.speedup, 4),
        "ci_low": _round(row.ci_low, 4),
        "ci_high": _round(row.ci_high, 4),
        "verdict": row.verdict,
    }


def comparison_rows_json(comparison: analysis.Comparison) -> list[dict[str, Any]]:
    return [comparison_row_json(comparison, row) for row in comparison.rows]


def verdicts_json(comparison: analysis.Comparison) -> list[dict[str, Any]]:
    """One sentence per measured candidate, as the pages' verdict cards say it."""
    return [
        {
            "candidate": card.candidate,
            "sentence": card.sentence,
            "kind": card.kind,
            "launches": card.launches,
            "simulated_acceptance": card.simulated,
        }
        for card in comparison.cards
    ]


def outputs_gates_json(comparison: analysis.Comparison) -> dict[str, dict[str, str]]:
    """Per candidate a gate may judge: the `outputs-differ` gate's outcome and why."""
    out = {}
    for name in comparison.candidates:
        if name == comparison.baseline or name in comparison.simulated:
            continue
        gate = comparison.outputs_gate(name)
        out[name] = {"outcome": gate.outcome, "message": gate.message}
    return out


def equivalence_json(gates: dict[str, analysis.Equivalence]) -> dict[str, Any]:
    return {name: gate.as_json() for name, gate in gates.items()}
