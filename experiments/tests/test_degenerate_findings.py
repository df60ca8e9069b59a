"""A run's degenerate-benchmark findings as its prompt results are recorded (actions/measurements.py): stored once on
the run, its template checked against the baseline's, whichever of the two was recorded first."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.actions.measurements import do_record_prompt_results
from experiments.models import Run
from experiments.tests.factories import make_experiment

pytestmark = pytest.mark.django_db


def _rows(prompt_tokens: int, *, loop_at: int | None = None) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "category": None,
            "ok": True,
            "output_len": 64,
            "accept_length": 2.5,
            "loop_at": loop_at,
            "loop_period": 4 if loop_at is not None else None,
            "loop_unit": "tokens",
            "prompt_digest": f"d{i}",
            "prompt_repeat_share": 0.0,
            "prompt_tokens": prompt_tokens + i,
        }
        for i in range(8)
    ]


def _runs() -> tuple[Run, Run]:
    experiment = make_experiment()
    runs = list(Run.objects.filter(experiment=experiment).order_by("sequence"))
    return runs[0], runs[1]  # the baseline's, the candidate's


def test_a_candidate_recorded_before_its_baseline_is_checked_when_the_baseline_arrives() -> None:
    baseline, candidate = _runs()
    do_record_prompt_results(candidate, 0, 1, _rows(111))
    candidate.refresh_from_db()
    assert candidate.degenerate_findings == []  # no baseline rows yet: nothing to compare with

    do_record_prompt_results(baseline, 0, 1, _rows(100))

    candidate.refresh_from_db()
    assert [f["kind"] for f in candidate.degenerate_findings] == ["template_mismatch"]
    assert "+11 prompt tokens on 8 of 8 prompts" in candidate.degenerate_reason
    baseline.refresh_from_db()
    assert baseline.degenerate_findings == [] and baseline.degenerate_reason == ""


def test_a_looping_baseline_is_flagged_and_a_healthy_candidate_after_it_is_not() -> None:
    baseline, candidate = _runs()
    do_record_prompt_results(baseline, 0, 1, _rows(100, loop_at=40))
    do_record_prompt_results(candidate, 0, 1, _rows(100))

    baseline.refresh_from_db()
    candidate.refresh_from_db()
    assert baseline.degenerate_reason == "outputs loop after 40 tokens in 8 of 8 requests"
    assert candidate.degenerate_findings == []
