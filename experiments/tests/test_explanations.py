"""The explanatory model beside each verdict, from plain values: no database."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from experiments.analysis import Point
from experiments.analysis.explanations import MODEL_METRICS, RunFacts, explain

BASELINE: list[Point] = [(1, 82.0, 80.0, 84.0), (4, 300.0, 298.0, 302.0)]
ACCEPT: dict[str, list[Point]] = {"eagle3-2step": [(1, 2.1, 2.0, 2.2), (4, 1.8, 1.8, 1.8)]}


@dataclass(frozen=True)
class _Config:
    name: str = "eagle3-2step"
    speculative_num_steps: int | None = 2
    log_metrics: dict[str, str] = field(default_factory=dict)


def _run(verify: list[list[float]], draft: list[list[float]], decode: list[tuple[int, int | None]]) -> RunFacts:
    return {"verify_ms": verify, "draft_ms": draft}, decode


def test_it_uses_the_times_logged_at_the_lowest_concurrency() -> None:
    # Verify 18 ms and 3 ms of draft for the cycle's 2 steps at batch 1; the samples at batch 4 are left out.
    run = _run(
        [[11, 17.0], [12, 18.0], [13, 19.0], [101, 40.0]], [[11, 3.0], [12, 3.0], [101, 6.0]], [(100, 4), (10, 1)]
    )

    model = explain(_Config(), [run], BASELINE, ACCEPT)

    result = model.break_even
    assert result is not None
    assert (model.candidate, model.concurrency, model.missing) == ("eagle3-2step", 1, [])
    assert (result.verify_ms, result.draft_ms, result.steps) == (18.0, 1.5, 2)
    assert result.needed_accept_length == pytest.approx(21.0 / (1000 / 82.0))
    assert result.accept_length == 2.1
    assert model.samples == 5 and model.batch_sizes == [1, 4]
    assert model.note == "Verify and draft times logged at batch 1."
    assert model.pays is True
    assert model.as_json()["break_even"]["predicted_speedup"] == pytest.approx(result.predicted_speedup)


def test_it_says_when_the_times_come_from_other_batch_sizes() -> None:
    run = _run([[11, 40.0], [12, 42.0]], [[11, 6.0]], [(10, 4)])

    model = explain(_Config(), [run], BASELINE, ACCEPT)

    assert model.break_even is not None and model.break_even.verify_ms == 41.0
    assert model.samples == 3 and model.batch_sizes == [4]
    assert "logged at batch 4, not at concurrency 1" in model.note and "overestimated" in model.note


def test_it_says_when_the_log_did_not_tell_the_batch() -> None:
    model = explain(_Config(), [_run([[3, 18.0]], [[3, 3.0]], [])], BASELINE, ACCEPT)

    assert model.break_even is not None
    assert model.batch_sizes == []
    assert "logged at unknown batch sizes" in model.note


def test_it_says_which_log_metrics_to_add() -> None:
    model = explain(_Config(), [_run([[3, 18.0]], [], [])], BASELINE, ACCEPT)

    assert (model.break_even, model.concurrency, model.missing) == (None, None, ["draft_ms"])
    assert MODEL_METRICS["draft_ms"].replace("\\", "\\\\") in model.note
    assert "EAGLE3_PROFILE=1" in model.note
    assert model.pays is None


def test_it_says_when_configured_metrics_never_matched() -> None:
    model = explain(_Config(log_metrics=dict(MODEL_METRICS)), [], BASELINE, ACCEPT)

    assert model.missing == ["verify_ms", "draft_ms"]
    assert "configured but no succeeded run logged a match" in model.note


def test_it_waits_for_the_baseline_throughput() -> None:
    model = explain(_Config(), [_run([[3, 18.0]], [[3, 3.0]], [])], [], ACCEPT)

    assert model.break_even is None and model.missing == []
    assert model.note == "Needs the baseline's throughput, not measured yet."


def test_it_refuses_times_the_model_cannot_use() -> None:
    model = explain(_Config(), [_run([[3, 0.0]], [[3, 3.0]], [])], BASELINE, ACCEPT)

    assert (model.break_even, model.concurrency) == (None, 1)
    assert model.note.startswith("The logged times cannot be used: verify_ms must be positive")


def test_it_counts_a_config_without_steps_as_one_step() -> None:
    model = explain(_Config(speculative_num_steps=None), [_run([[3, 18.0]], [[3, 3.0]], [])], BASELINE, {})

    assert model.break_even is not None
    assert (model.break_even.steps, model.break_even.draft_ms, model.break_even.accept_length) == (1, 3.0, None)
