"""A headroom study (what a better draft would be worth) as the API shows it."""

from __future__ import annotations

from typing import Any

from experiments.reads.headroom import HeadroomView


def headroom_json(view: HeadroomView) -> dict[str, Any]:
    """The API's shape of a study."""
    study, result = view.study, view.result
    model = view.model.break_even if view.model is not None else None
    return {
        "id": study.pk,
        "experiment": study.experiment_id,
        "source": study.source_id,
        "url": study.get_absolute_url(),
        "status": view.status,
        "config": study.config.name,
        "accept_lengths": study.accept_lengths,
        "measured_accept_length": result.accept_length,
        "target_accept_length": result.target,
        "sentence": result.sentence,
        "break_even_sentence": result.break_even_sentence,
        "simulated_acceptance_measures": "speed only, never output quality",
        "model_break_even": None if model is None else model.needed_accept_length,
        "levels": [
            {
                "concurrency": level.concurrency,
                "baseline_tok_s": level.baseline_tok_s,
                "break_even_accept_length": level.break_even,
                "real": None if level.real is None else vars(level.real),
                "simulated": [vars(p) for p in level.simulated],
            }
            for level in result.levels
        ],
    }
