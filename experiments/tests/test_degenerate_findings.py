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


LOOP = [
    {"kind": "repetition_loop", "count": 8, "total": 8, "sentence": "outputs loop after 40 tokens in 8 of 8 requests"}
]


def test_compare_and_the_experiments_table_read_the_runs_findings(client, owner, owner_client) -> None:
    from experiments.models import ApiToken

    from .factories import make_config, make_eagle_config
    from .test_compare import _measured, _pick

    experiment = _measured(
        "looping", {"baseline": [80.0, 81.0, 82.0], "eagle3-2step": [95.0, 96.0, 97.0]},
        baseline=make_config(name="baseline"), candidates=[make_eagle_config(name="eagle3-2step")],
    )  # fmt: skip
    Run.objects.filter(experiment=experiment, config__name="eagle3-2step").update(degenerate_findings=LOOP)
    _, token = ApiToken.issue(owner)
    picks = [_pick(experiment, "baseline"), _pick(experiment, "eagle3-2step")]

    body = client.get("/api/compare", {"pick": picks}, headers={"Authorization": f"Bearer {token}"}).json()

    assert {row["degenerate"] for row in body["comparison"]} == {
        "its runs are degenerate: outputs loop after 40 tokens in 8 of 8 requests"
    }
    assert all(row["gate"]["outcome"] == "failed" for row in body["comparison"])
    # The experiments table's best cell: none to trust, where the only candidate loops.
    html = owner_client.get("/experiments/").content.decode()
    assert "eagle3-2step @c=" not in html
    Run.objects.filter(experiment=experiment).update(degenerate_findings=[])
    assert "eagle3-2step @c=" in owner_client.get("/experiments/").content.decode()
